#!/usr/bin/env bash
# test_batch_snakemake.sh - pipeline/Snakefile run locally by Debian's snakemake on 2 tiny recordings
# (raw + probe folders): both Phy folders validate, each job's log exists, the memory each rule
# instance declares (resources.mem_mb) equals what `boundsort batch --dry-run --json` planned (sort
# budget + overhead), and a second run has nothing to do. With root, SLURM installed and not under
# the sanitizers, the same workflow also runs through the SLURM profile (pipeline/profiles/slurm) on
# the single-node test SLURM (scripts/slurm-up.sh, stopped by pid on exit): with Debian's Snakemake 7
# (config.yaml), then with Snakemake 8 and 9 and the SLURM executor plugin from PyPI in venvs
# (config.v8+.yaml; skipped when PyPI cannot be reached).
# Skips (77) when snakemake is absent (scripts/deps.sh installs it) and under the sanitizers (the
# workflow adds no C code path that tests/cli/test_batch.sh does not run there; the normal build runs it).
. "$(dirname "$0")/lib.sh"
command -v snakemake >/dev/null || { echo "skip: snakemake not installed"; exit 77; }
[ -n "${BS_SANITIZED:-}" ] && { echo "skip: the Snakemake test runs in the normal build"; exit 77; }
dur=3
R="$T/root"
for s in 1 2; do "$BS" simulate -o "$R/s$s" --probe linear32 --duration $dur --units 5 --seed $s -q || exit 1; done
export USER=${USER:-$(id -un)}
smk() { # smk OUTROOT WORKDIR [snakemake options]
  local out=$1 wd=$2; shift 2
  snakemake -s "$SRC/pipeline/Snakefile" -d "$wd" --config root="$R" outroot="$out" boundsort="$BS" threads=1 no_qc=1 "$@"
}
smk "$T/out" "$T/wd" --cores 2 --resources mem_mb=4000 >"$T/smk.txt" 2>&1; rc=$?
[ $rc = 0 ] && ok || { bad "snakemake exited $rc"; tail -30 "$T/smk.txt" >&2; }
for s in 1 2; do
  "$BS" validate "$T/out/s$s/recording" >/dev/null 2>&1 && ok || bad "s$s does not validate"
  [ -f "$T/out/.batch/snakemake/s$s/recording.log" ] && ok || bad "no log for s$s"
done
# the declared memory: sort budget + overhead from the batch planner + 256 MiB for the Snakemake process
# around each job (config snakemake_mb), as snakemake reports it
"$BS" batch "$R" -o "$T/out" --dry-run --json -q --threads 1 --no-qc >"$T/plan.json" || bad "batch --dry-run --json"
smk "$T/out2" "$T/wd2" --cores 2 --dry-run >"$T/dry.txt" 2>&1
$PY - "$T/plan.json" "$T/dry.txt" <<'PY' && ok || bad "planned memory vs rule resources: $(grep -i mem_mb "$T/dry.txt")"
import json, re, sys
p = json.load(open(sys.argv[1]))
ovh = p["slurm"]["overhead_bytes"]
want = sorted(-(-(j["sort_mem_bytes"] + ovh) // 2**20) + 256 for j in p["jobs"] if j["sortable"])
got = sorted(int(m) for m in re.findall(r"mem_mb=(\d+)", open(sys.argv[2]).read()))
assert len(want) == 2 and got == want, (want, got)
PY
smk "$T/out" "$T/wd" --cores 2 -n >"$T/again.txt" 2>&1
grep -q "Nothing to be done" "$T/again.txt" && ok || bad "second run is not a no-op: $(tail -5 "$T/again.txt")"

# ---- the SLURM profile ----
if [ "$(id -u)" = 0 ] && { command -v slurmctld >/dev/null || [ -x /usr/sbin/slurmctld ]; }; then
  # slurm-down only after our own slurm-up succeeded: a SLURM someone else started (rc 77) is not
  # ours to stop (ctest also runs this test and test_batch_slurm under one RESOURCE_LOCK)
  bash "$SRC/scripts/slurm-up.sh" >/dev/null; rc=$?
  if [ $rc = 0 ]; then
    trap 'bash "$SRC/scripts/slurm-down.sh"' EXIT
    smk "$T/sout" "$T/swd" --profile "$SRC/pipeline/profiles/slurm" >"$T/smk-slurm.txt" 2>&1; rc=$?
    [ $rc = 0 ] && ok || { bad "snakemake with the SLURM profile exited $rc"; tail -30 "$T/smk-slurm.txt" >&2; }
    for s in 1 2; do "$BS" validate "$T/sout/s$s/recording" >/dev/null 2>&1 && ok || bad "SLURM s$s does not validate"; done
    grep -q "external jobid" "$T/smk-slurm.txt" && ok || bad "jobs were not submitted to SLURM"
    # Snakemake 8 and 9 with the SLURM executor plugin, from PyPI (the same profile folder:
    # config.v8+.yaml); this SLURM keeps no accounting database, so job states come from squeue
    if python3 -m pip download -q --no-deps -d "$T/probe" snakemake-executor-plugin-slurm >/dev/null 2>&1; then
      for m in 8 9; do
        python3 -m venv "$T/smk$m" && "$T/smk$m/bin/pip" install -q "snakemake>=$m,<$((m + 1))" \
          snakemake-executor-plugin-slurm >"$T/pip$m.txt" 2>&1 && ok || { bad "pip install snakemake $m: $(tail -3 "$T/pip$m.txt")"; continue; }
        PATH=$T/smk$m/bin:$PATH smk "$T/sout$m" "$T/swd$m" --profile "$SRC/pipeline/profiles/slurm" \
          --slurm-status-command squeue --slurm-no-account --slurm-init-seconds-before-status-checks 2 \
          --seconds-between-status-checks 2 >"$T/smk-slurm$m.txt" 2>&1; rc=$?
        [ $rc = 0 ] && ok || { bad "snakemake $m with the SLURM profile exited $rc"; tail -30 "$T/smk-slurm$m.txt" >&2; }
        [ "$(grep -c "submitted with SLURM jobid" "$T/smk-slurm$m.txt")" = 2 ] && ok \
          || bad "snakemake $m: the jobs were not submitted by the SLURM executor"
        for s in 1 2; do "$BS" validate "$T/sout$m/s$s/recording" >/dev/null 2>&1 && ok || bad "snakemake $m: s$s does not validate"; done
      done
    else
      echo "note: PyPI cannot be reached: Snakemake 8/9 not tested"
    fi
  else
    echo "note: SLURM could not be started ($rc); profile not tested"
  fi
fi
finish
