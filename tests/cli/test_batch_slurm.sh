#!/usr/bin/env bash
# test_batch_slurm.sh - `boundsort batch --slurm` against a real single-node SLURM (scripts/slurm-up.sh:
# munged + slurmctld + slurmd from Debian's packages, started by this test and stopped by pid on exit
# whatever happens). One array of 4 tasks: 3 tiny linear32 recordings and one Neuropixels recording
# whose plan needs more than --mem-per-task. Checks: the --dry-run script (array size, --mem = largest
# task budget + overhead, --cpus-per-task, --time/--partition-free), the submission's job id, every
# small output validates, the big task is refused by boundsort itself (exit 3 in its status, SLURM state
# FAILED, not OUT_OF_MEMORY) and --status shows the planner's reason; --retry-failed resubmits only it.
# An OUTROOT holding spaces, '#', '%' and '"' is submitted too: sbatch parses the quoted --output line.
# --max-running 1 and --sbatch-extra (directives and setup lines) on a second array; --dry-run --json
# with --slurm; a forbidden directive, and an unknown partition (sbatch's own error text in the message).
# Skips (77) without root or the SLURM packages, and under the sanitizers (the normal build runs it).
# BS_BATCH_DOCS=DIR saves the dry-run script and the status summary there (docs/batch/).
. "$(dirname "$0")/lib.sh"
[ -n "${BS_SANITIZED:-}" ] && { echo "skip: SLURM test runs in the normal build"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "skip: needs root to start SLURM"; exit 77; }
command -v slurmctld >/dev/null || [ -x /usr/sbin/slurmctld ] || { echo "skip: slurmctld not installed"; exit 77; }
chmod 755 "$T"
trap 'bash "$SRC/scripts/slurm-down.sh"' EXIT
bash "$SRC/scripts/slurm-up.sh"; rc=$?
[ $rc = 77 ] && { trap - EXIT; echo "skip: SLURM could not be started here"; exit 77; }
[ $rc = 0 ] || { echo "slurm-up failed ($rc)"; exit 1; }

R="$T/root"; O="$T/out"
for s in 1 2 3; do "$BS" simulate -o "$R/lab/sess$s" --probe linear32 --duration 3 --units 5 --seed $s -q || exit 1; done
"$BS" simulate -o "$T/big" --probe np1 --duration 1 --units 5 --seed 9 -q || exit 1
mkdir -p "$R/lab/big"; cp "$T/big/recording.bin" "$T/big/probe.json" "$T/big/recording.json" "$R/lab/big/"
ARGS=(--slurm --cpus-per-task 1 --mem-per-task 100M --time 10 --no-qc)
"$BS" batch "$R" -o "$O" "${ARGS[@]}" --dry-run >"$T/dry.txt" 2>&1; rc=$?
# 3 sortable recordings that fit and one that will be refused: the listing warns; the script holds 4 tasks
[ $rc = 0 ] && ok || bad "dry run exited $rc: $(cat "$T/dry.txt")"
grep -q "boundsort will refuse it (exit 3)" "$T/dry.txt" && ok || bad "listing lacks the refusal warning"
grep -q '^#SBATCH --array=0-3$' "$T/dry.txt" && grep -q '^#SBATCH --cpus-per-task=1$' "$T/dry.txt" \
  && grep -q '^#SBATCH --time=10$' "$T/dry.txt" && ! grep -q -- '--partition' "$T/dry.txt" && ok || bad "script header"
# --mem = 100 MiB sort budget + the overhead of a 1-thread run (plan --json overhead_bytes)
ovh=$("$BS" plan "$R/lab/sess1/recording.bin" --probe "$R/lab/sess1/probe.json" --fs 30000 --threads 1 --json | \
  $PY -c "import json,sys; print(json.load(sys.stdin)['overhead_bytes'] // 2**20)")
grep -q "^#SBATCH --mem=$((100 + ovh))M$" "$T/dry.txt" && ok || bad "--mem is not 100M + ${ovh}M: $(grep mem= "$T/dry.txt")"
[ ! -e "$O/.batch/state.json" ] && ok || bad "dry run wrote state"
sed -n '/^#!\/bin\/bash/,$p' "$T/dry.txt" >"$T/dry-script.sbatch"

"$BS" batch "$R" -o "$O" "${ARGS[@]}" -q >"$T/submit.txt" 2>&1; rc=$?
[ $rc = 0 ] && ok || bad "submission exited $rc: $(cat "$T/submit.txt")"
job=$($PY -c "import json; print(json.load(open('$O/.batch/state.json'))['jobs'][0]['slurm_id'].split('_')[0])")
[ -n "$job" ] && squeue -h -j "$job" >/dev/null 2>&1 && ok || bad "no array job id recorded"
"$BS" batch "$R" -o "$O" --status >"$T/status0.txt" || bad "--status while queued"
for _ in $(seq 600); do [ -z "$(squeue -h -j "$job" -o %i 2>/dev/null)" ] && break; sleep 0.5; done
[ -z "$(squeue -h -j "$job" -o %i)" ] && ok || bad "array still queued after 300 s"
"$BS" batch "$R" -o "$O" --status >"$T/status.txt"; cat "$T/status.txt"
"$BS" batch "$R" -o "$O" --status --json >"$T/status.json"
$PY - "$T/status.json" <<'PY' && ok || bad "status after the array ended: $(cat "$T/status.txt")"
import json, sys
s = json.load(open(sys.argv[1]))
by = {j["out"].rsplit("/", 2)[-2]: j for j in s["jobs"]}
assert s["counts"]["done"] == 3 and s["counts"]["failed"] == 1, s["counts"]
big = by["big"]
assert big["state"] == "failed" and big["exit_code"] == 3, big
assert "does not fit the memory budget" in big["reason"] and "raise --mem" in big["reason"], big["reason"]
for k in ("sess1", "sess2", "sess3"):
    assert by[k]["state"] == "done" and by[k]["exit_code"] == 0, by[k]
PY
for s in 1 2 3; do "$BS" validate "$O/lab/sess$s/recording" >/dev/null 2>&1 && ok || bad "sess$s does not validate"; done
bigtask=$($PY -c "import json; print([j['slurm_id'] for j in json.load(open('$O/.batch/state.json'))['jobs'] if '/big/' in j['out']][0])")
sstate=$(scontrol -o show job "$bigtask" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
[ "$sstate" = FAILED ] && ok || bad "SLURM state of the refused task is '$sstate', expected FAILED (not OUT_OF_MEMORY)"

"$BS" batch "$R" -o "$O" --retry-failed >"$T/retry.txt" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "resubmitting 1 failed" "$T/retry.txt" && [ -f "$O/.batch/submit-2.sbatch" ] \
  && grep -q '^#SBATCH --array=0-0$' "$O/.batch/submit-2.sbatch" && ok || bad "retry: $(cat "$T/retry.txt")"
job2=$($PY -c "import json; print([j['slurm_id'] for j in json.load(open('$O/.batch/state.json'))['jobs'] if '/big/' in j['out']][0].split('_')[0])")
[ "$job2" != "$job" ] && ok || bad "retry did not record a new job id"
for _ in $(seq 600); do [ -z "$(squeue -h -j "$job2" -o %i 2>/dev/null)" ] && break; sleep 0.5; done
"$BS" batch "$R" -o "$O" --status --json | $PY -c "
import json,sys; s=json.load(sys.stdin); c=s['counts']; assert c['done']==3 and c['failed']==1, c" && ok || bad "status after retry: $("$BS" batch "$R" -o "$O" --status 2>&1)"

# an OUTROOT with spaces, '#', '%' and '"': sbatch's own parser reads the quoted --output, and the array's
# log lands in OUTROOT/.batch/logs with %A_%a expanded
R3="$T/root3"; O3="$T/out dir #3 50% \"q\""
mkdir -p "$R3" && cp -r "$R/lab/sess1" "$R3/"
"$BS" batch "$R3" -o "$O3" "${ARGS[@]}" -q >"$T/submit3.txt" 2>&1; rc=$?
[ $rc = 0 ] && ok || bad "submission to an OUTROOT with spaces exited $rc: $(cat "$T/submit3.txt")"
job3=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['jobs'][0]['slurm_id'].split('_')[0])" "$O3/.batch/state.json")
for _ in $(seq 600); do [ -z "$(squeue -h -j "$job3" -o %i 2>/dev/null)" ] && break; sleep 0.5; done
[ -f "$O3/.batch/logs/slurm-${job3}_0.out" ] && ok || bad "no SLURM log in '$O3/.batch/logs': $(ls -R "$T" | head -30)"
"$BS" batch "$R3" -o "$O3" --status --json | $PY -c "
import json,sys; c=json.load(sys.stdin)['counts']; assert c['done']==1, c" && ok || bad "the OUTROOT with spaces: task not done: $("$BS" batch "$R3" -o "$O3" --status 2>&1; cat "$O3"/.batch/logs/* 2>&1 | tail -20)"

# --max-running 1 (the array's %1 throttle) and --sbatch-extra: its #SBATCH lines join the script's, its
# other lines run before each sort; forbidden directives and an sbatch failure are reported with reasons
R4="$T/root4"; O4="$T/out4"
mkdir -p "$R4" && cp -r "$R/lab/sess1" "$R/lab/sess2" "$R4/"
printf '#!/bin/bash\n#SBATCH --comment=bs-extra-test\nexport BS_SETUP_MARK=setup-ran\necho "$BS_SETUP_MARK"\n' >"$T/extra.sh"
"$BS" batch "$R4" -o "$O4" "${ARGS[@]}" --max-running 1 --sbatch-extra "$T/extra.sh" --dry-run --json -q >"$T/dry4.json"; rc=$?
$PY - "$T/dry4.json" <<'PY' && [ $rc = 0 ] && ok || bad "--dry-run --json with --slurm: $(head -c 600 "$T/dry4.json")"
import json, sys
d = json.load(open(sys.argv[1]))
lines = d["sbatch_script"].splitlines()
assert "#SBATCH --array=0-1%1" in lines and "#SBATCH --comment=bs-extra-test" in lines, lines[:12]
# the directives come before the first command (sbatch stops reading them there); the setup before the sort
first_cmd = next(i for i, l in enumerate(lines) if l and not l.startswith("#"))
assert lines.index("#SBATCH --comment=bs-extra-test") < first_cmd and lines.count("#!/bin/bash") == 1
assert lines.index('echo "$BS_SETUP_MARK"') < next(i for i, l in enumerate(lines) if '"$BOUNDSORT" sort' in l)
assert d["slurm"]["max_running"] == 1 and "bs-extra-test" in d["slurm"]["sbatch_extra"] and len(d["jobs"]) == 2
PY
"$BS" batch "$R4" -o "$O4" "${ARGS[@]}" --max-running 1 --sbatch-extra "$T/extra.sh" -q >"$T/submit4.txt" 2>&1; rc=$?
[ $rc = 0 ] && ok || bad "submission with --max-running/--sbatch-extra exited $rc: $(cat "$T/submit4.txt")"
job4=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['jobs'][0]['slurm_id'].split('_')[0])" "$O4/.batch/state.json")
scontrol -o show job "$job4" 2>/dev/null | grep -q "ArrayTaskThrottle=1" && ok || bad "no ArrayTaskThrottle=1 on job $job4"
for _ in $(seq 600); do [ -z "$(squeue -h -j "$job4" -o %i 2>/dev/null)" ] && break; sleep 0.5; done
"$BS" batch "$R4" -o "$O4" --status --json | $PY -c "
import json,sys; c=json.load(sys.stdin)['counts']; assert c['done']==2, c" && ok || bad "--max-running 1: not done"
[ "$(cat "$O4"/.batch/logs/slurm-"${job4}"_*.out 2>/dev/null | grep -c '^setup-ran$')" = 2 ] && ok \
  || bad "the --sbatch-extra setup lines did not run in each task: $(cat "$O4"/.batch/logs/slurm-* 2>&1 | head)"
printf '#SBATCH --mem=100G\n' >"$T/extra_bad.sh"
expect 1 "line 1: #SBATCH --mem is not allowed in --sbatch-extra" "$BS" batch "$R4" -o "$T/o5" --slurm --sbatch-extra "$T/extra_bad.sh" --dry-run -q
expect 1 "options of --slurm" "$BS" batch "$R4" -o "$T/o5" --max-running 2 --dry-run -q
# sbatch's own words when it refuses the job (an unknown partition)
expect 2 "sbatch failed (exit 1): sbatch: error: .*[Pp]artition" "$BS" batch "$R4" -o "$T/o6" "${ARGS[@]}" --partition nosuchpart -q

if [ -n "${BS_BATCH_DOCS:-}" ]; then
  mkdir -p "$BS_BATCH_DOCS"
  sed "s#$T#/data/TMP#g" "$T/dry-script.sbatch" >"$BS_BATCH_DOCS/dry-run.sbatch"
  sed "s#$T#/data/TMP#g" "$T/status.txt" >"$BS_BATCH_DOCS/status.txt"
fi
finish
