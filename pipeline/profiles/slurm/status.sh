#!/usr/bin/env bash
# status.sh JOBID - Snakemake's --cluster-status hook: prints running, success or failed for a SLURM job,
# from scontrol while the controller remembers the job, then from `sacct -c` (job completion log) or
# plain sacct (with slurmdbd). Unknown ids count as running until one of them knows them.
id=$1
st=$(scontrol -o show job "$id" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
[ -z "$st" ] && st=$(sacct -n -P -X -j "$id" -o State 2>/dev/null | head -1 | cut -d' ' -f1)
[ -z "$st" ] && st=$(sacct -c -n -P -j "$id" -o State 2>/dev/null | tail -1 | cut -d' ' -f1)
case "$st" in
  COMPLETED) echo success ;;
  PENDING|RUNNING|CONFIGURING|COMPLETING|SUSPENDED|REQUEUED|RESIZING|"") echo running ;;
  *) echo failed ;;
esac
