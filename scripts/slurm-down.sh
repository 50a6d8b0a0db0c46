#!/usr/bin/env bash
# slurm-down.sh - stop what slurm-up.sh started: cancel the jobs still queued or running (they live in
# slurmstepd and outlive slurmd), then stop slurmd, slurmctld and munged by the pids slurm-up.sh
# recorded in /run/boundsort-slurm.pids, each only if that pid still runs a process of that name.
# Daemons it did not start are left alone. Safe to run twice.
set -u
PIDS=/run/boundsort-slurm.pids
[ -s "$PIDS" ] || exit 0
if command -v squeue >/dev/null && grep -q '^slurmctld ' "$PIDS"; then
  ids=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  [ -n "${ids// }" ] && scancel $ids 2>/dev/null
fi
for name in slurmd slurmctld munged; do   # reverse order of starting
  pf=$(sed -n "s/^$name //p" "$PIDS")
  [ -n "$pf" ] && [ -s "$pf" ] || continue
  pid=$(cat "$pf")
  if [ "$(ps -o comm= -p "$pid" 2>/dev/null)" = "$name" ]; then
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  rm -f "$pf"
done
rm -f "$PIDS"
