#!/usr/bin/env bash
# test_batch.sh - `boundsort batch` locally:
#   - discovery on a tree with a SpikeGLX run of 2 probes, an Open Ephys Record Node (its neural
#     stream only; LFP and NI-DAQ streams are not jobs), a raw + probe folder, a broken raw folder
#     (no recording.json) and a truncated .ap.bin whose .meta disagrees: --list --json gives the kind,
#     channels, duration and planned peak of each (equal to `boundsort plan` under the same budget),
#     the reason of each broken one, and the mirrored output paths;
#   - a local batch of 3 tiny recordings, 2 at once within --mem: one fails (its output path is a
#     file), the others go on and validate; --status shows the failure and its reason; after the
#     cause is removed --retry-failed reruns only that job; every output validates; a second plain
#     run refuses (exit 1) without --restart; --dry-run runs nothing.
. "$(dirname "$0")/lib.sh"
dur=4; [ -n "${BS_SANITIZED:-}" ] && dur=3   # 3 s: every seed here finds units

# ---- discovery ----
"$BS" simulate -o "$T/np1" --probe np1 --duration 1 --units 5 --seed 3 --spikeglx --openephys -q || { echo "simulate failed"; exit 1; }
"$BS" simulate -o "$T/lin" --probe linear32 --duration 1 --units 4 --seed 4 -q || { echo "simulate failed"; exit 1; }
D="$T/tree"
mkdir -p "$D/mouse1/run_g0/run_g0_imec0" "$D/mouse1/run_g0/run_g0_imec1" "$D/mouse2" "$D/mouse3/raw" "$D/mouse3/broken" "$D/mouse4"
for p in 0 1; do for e in bin meta; do
  cp "$T/np1/spikeglx/sim_g0_t0.imec0.ap.$e" "$D/mouse1/run_g0/run_g0_imec$p/run_g0_t0.imec$p.ap.$e"
done; done
cp -r "$T/np1/openephys/Record Node 101" "$D/mouse2/"
cp "$T/lin/recording.bin" "$T/lin/probe.json" "$T/lin/recording.json" "$D/mouse3/raw/"
cp "$T/lin/recording.bin" "$T/lin/probe.json" "$D/mouse3/broken/"
head -c 1000 "$T/np1/spikeglx/sim_g0_t0.imec0.ap.bin" > "$D/mouse4/bad_g0_t0.imec0.ap.bin"
"$BS" batch "$D" --list --json --threads 2 --mem 8G >"$T/list.json"; rc=$?
[ $rc = 0 ] && ok || bad "batch --list exited $rc"
# the budget batch plans under: --mem minus the untracked overhead of a 2-thread run
ovh=$("$BS" plan "$T/lin/recording.bin" --probe "$T/lin/probe.json" --fs 30000 --threads 2 --json | \
  $PY -c "import json,sys; print(json.load(sys.stdin)['overhead_bytes'] // 2**20)")
"$BS" plan "$D/mouse3/raw/recording.bin" --probe "$D/mouse3/raw/probe.json" --fs 30000 --uv-per-bit \
  "$($PY -c "import json;print(json.load(open('$T/lin/recording.json'))['uv_per_bit'])")" --n-chan 32 --threads 2 \
  --mem $((8 * 1024 - ovh))M --json >"$T/plan_raw.json" || bad "plan of the raw folder"
"$BS" plan "$D/mouse1/run_g0/run_g0_imec1/run_g0_t0.imec1.ap.bin" --threads 2 --mem $((8 * 1024 - ovh))M --json \
  >"$T/plan_sglx.json" || bad "plan of the SpikeGLX probe"
$PY - "$T/list.json" "$T" "$T/plan_raw.json" "$T/plan_sglx.json" <<'PY' && ok || bad "discovery listing"
import json, sys, os
L = json.load(open(sys.argv[1])); T = sys.argv[2]
pr = json.load(open(sys.argv[3])); ps = json.load(open(sys.argv[4]))
def peak(p):
    for k in ("peak_bytes", "peak"):
        if k in p: return p[k]
    raise KeyError("no peak in plan json: %s" % list(p))
errs = []
def need(c, what):
    if not c: errs.append(what)
recs = {r["rel"]: r for r in L["recordings"]}
want = {
  "mouse1/run_g0/run_g0_imec0/run_g0_t0.imec0": ("spikeglx", True),
  "mouse1/run_g0/run_g0_imec1/run_g0_t0.imec1": ("spikeglx", True),
  "mouse2/Record Node 101/experiment1/recording1/ProbeA-AP": ("openephys", True),
  "mouse3/raw/recording": ("raw", True),
  "mouse3/broken/recording": ("raw", False),
  "mouse4/bad_g0_t0.imec0": ("spikeglx", False),
}
need(sorted(recs) == sorted(want), f"jobs {sorted(recs)}")
need(L["outroot"] == os.path.realpath(T) + "/tree_sorted", f"default outroot {L['outroot']}")
for rel, (kind, sortable) in want.items():
    r = recs.get(rel)
    if not r: continue
    need(r["kind"] == kind and r["sortable"] == sortable, f"{rel}: {r['kind']} {r['sortable']}")
    need(r["out"] == L["outroot"] + "/" + rel, f"{rel}: out {r['out']}")
    if sortable:
        need(r["duration_s"] == 1.0 and r["plan_peak_bytes"] > 0, f"{rel}: duration/plan")
        need(r["job_mem_bytes"] > r["sort_mem_bytes"] >= 1.25 * r["plan_peak_bytes"] - 2**20, f"{rel}: budgets")
        need(r["sort_mem_bytes"] % 2**20 == 0, f"{rel}: sort budget in whole MiB")
    else:
        need(len(r["reason"]) > 10, f"{rel}: reason")
need(recs["mouse2/Record Node 101/experiment1/recording1/ProbeA-AP"]["stream"] == "ProbeA-AP", "OE stream")
need(recs["mouse2/Record Node 101/experiment1/recording1/ProbeA-AP"]["n_chan"] == 384, "OE channels")
need(recs["mouse1/run_g0/run_g0_imec1/run_g0_t0.imec1"]["n_chan"] == 383, "SpikeGLX channels (reference excluded)")
need(recs["mouse3/raw/recording"]["n_chan"] == 32, "raw channels")
need(recs["mouse3/raw/recording"]["bytes"] == os.path.getsize(T + "/lin/recording.bin"), "raw bytes")
need(recs["mouse3/raw/recording"]["plan_peak_bytes"] == peak(pr), f"raw plan {recs['mouse3/raw/recording']['plan_peak_bytes']} vs {peak(pr)}")
need(recs["mouse1/run_g0/run_g0_imec1/run_g0_t0.imec1"]["plan_peak_bytes"] == peak(ps), "SpikeGLX plan")
need("recording.json" in recs["mouse3/broken/recording"]["reason"], "broken raw reason names recording.json")
if errs:
    print("\n".join(errs)); sys.exit(1)
PY
"$BS" batch "$D" --list >"$T/list.txt" && grep -q "not sortable" "$T/list.txt" && grep -q "6 recording(s), 4 sortable" "$T/list.txt" \
  && ok || bad "table listing: $(cat "$T/list.txt")"
"$BS" batch "$T/nope" --list 2>/dev/null; [ $? = 2 ] && ok || bad "missing ROOT should exit 2"
# names holding a newline, a tab or another control character: escaped in the table (one line per row,
# nothing forged), as they are in the JSON (valid JSON)
W="$T/weird"; nl=$'a\nfake row'; tb=$'t\tb'; es=$'e\033x'
for n in "$nl" "$tb" "$es"; do mkdir -p "$W/$n"; cp "$T/lin/recording.bin" "$T/lin/probe.json" "$T/lin/recording.json" "$W/$n/"; done
"$BS" batch "$W" --list >"$T/wlist.txt"; rc=$?
[ $rc = 0 ] && grep -qF 'a\nfake row' "$T/wlist.txt" && grep -qF 't\tb' "$T/wlist.txt" && grep -qF 'e\x1bx' "$T/wlist.txt" \
  && ! grep -q '^fake row' "$T/wlist.txt" && ! LC_ALL=C grep -q $'[\t\033]' "$T/wlist.txt" \
  && ! grep -Evq '^(root|outroot| id|  [0-9] |     (warning|not sortable): |3 recording)' "$T/wlist.txt" && ok || bad "names not escaped in the table: $(cat -A "$T/wlist.txt")"
"$BS" batch "$W" --list --json | $PY -c "
import json, sys; r = json.load(sys.stdin)['recordings']
assert sorted(j['rel'].split('/')[0] for j in r) == sorted(sys.argv[1:]), r" "$nl" "$tb" "$es" \
  && ok || bad "names in the JSON listing"
# the SLURM script of an OUTROOT with spaces, '#', '%' and '"': one double-quoted --output argument
O2="$T/out dir #1 50% \"q\""
"$BS" batch "$T/lin" -o "$O2" --slurm --dry-run --no-qc >"$T/sdry.txt" 2>&1; rc=$?
[ $rc = 0 ] && grep -qxF "#SBATCH --output=\"$T/out dir #1 50%% \\\"q\\\"/.batch/logs/slurm-%A_%a.out\"" "$T/sdry.txt" \
  && ok || bad "--output line (rc $rc): $(grep -a -- --output "$T/sdry.txt")"
expect 2 "backslash" "$BS" batch "$T/lin" -o "$T/back\\slash" --slurm --dry-run --no-qc
"$BS" batch "$D" --jobs 0 2>/dev/null; [ $? = 1 ] && ok || bad "--jobs 0 should exit 1"

# ---- local batch ----
R="$T/root"; O="$T/out"
for s in 1 2 3; do "$BS" simulate -o "$R/sess$s" --probe linear32 --duration $dur --units 5 --seed $s -q || exit 1; done
"$BS" batch "$R" -o "$O" --dry-run --no-qc >"$T/dry.txt"; rc=$?
[ $rc = 0 ] && [ "$(grep -c '^boundsort sort ' "$T/dry.txt")" = 3 ] && [ ! -e "$O" ] && ok || bad "dry run (rc $rc): $(cat "$T/dry.txt")"
# the GPU options reach every job's sort (each task checks its own GPU)
"$BS" batch "$R" -o "$O" --dry-run --no-qc --device cuda:1 --gpu-mem 8G >"$T/dry_gpu.txt"; rc=$?
[ $rc = 0 ] && [ "$(grep -c '^boundsort sort .* --device cuda:1 --gpu-mem 8192M' "$T/dry_gpu.txt")" = 3 ] && ok \
  || bad "dry run with --device (rc $rc): $(cat "$T/dry_gpu.txt")"
expect_fixed 1 "--gpu-mem is the budget of --device cuda" -- "$BS" batch "$R" -o "$O" --dry-run --gpu-mem 8G
# a disk budget reaches every job's sort (each for its own OUT)
"$BS" batch "$R" -o "$O" --dry-run --no-qc --disk 2G >"$T/dry_disk.txt"; rc=$?
[ $rc = 0 ] && [ "$(grep -c '^boundsort sort .* --disk 2147483648' "$T/dry_disk.txt")" = 3 ] && ok \
  || bad "dry run with --disk (rc $rc): $(cat "$T/dry_disk.txt")"
# a parameters file reaches every job's sort by its absolute path (before the options that override it);
# a bad one is refused before anything is planned
echo '{"Th_learned": 9, "tmax": 3}' >"$T/bp.json"
(cd "$T" && "$BS" batch "$R" -o "$O" --dry-run --no-qc --params bp.json --max-center-spikes 5000) >"$T/dry_p.txt"; rc=$?
[ $rc = 0 ] && [ "$(grep -c "^boundsort sort .* --params $T/bp.json --max-center-spikes 5000" "$T/dry_p.txt")" = 3 ] \
  && ok || bad "dry run with --params (rc $rc): $(cat "$T/dry_p.txt")"
echo '{"Th_lerned": 9}' >"$T/bp2.json"
expect_fixed 1 "the nearest known one is 'Th_learned'" -- "$BS" batch "$R" -o "$O" --dry-run --params "$T/bp2.json"
mkdir -p "$O/sess2"; echo "in the way" > "$O/sess2/recording"     # job 1 cannot write its output
"$BS" batch "$R" -o "$O" --jobs 2 --mem 2G --threads 1 --no-qc >"$T/run1.txt" 2>&1; rc=$?
[ $rc = 2 ] && ok || bad "batch with one failing job exited $rc, expected 2: $(cat "$T/run1.txt")"
for s in 1 3; do "$BS" validate "$O/sess$s/recording" >/dev/null 2>&1 && ok || bad "sess$s does not validate"; done
"$BS" batch "$R" -o "$O" --status --json >"$T/st1.json" || bad "--status"
$PY - "$T/st1.json" <<'PY' && ok || bad "status after the first run"
import json, sys
s = json.load(open(sys.argv[1]))
st = {j["id"]: j for j in s["jobs"]}
assert s["counts"]["done"] == 2 and s["counts"]["failed"] == 1, s["counts"]
assert st[1]["state"] == "failed" and st[1]["exit_code"] == 2, st[1]
assert "sess2/recording" in st[1]["reason"], st[1]["reason"]
assert st[0]["state"] == st[2]["state"] == "done"
PY
"$BS" batch "$R" -o "$O" --status | grep -q "1 failed" && ok || bad "--status table"
"$BS" batch "$R" -o "$O" --no-qc >/dev/null 2>"$T/again.txt"; rc=$?
[ $rc = 1 ] && grep -q -- "--restart" "$T/again.txt" && ok || bad "second plain run exited $rc"
cp "$O/.batch/tasks/0.start" "$T/start0"
rm "$O/sess2/recording"
sleep 1
"$BS" batch "$R" -o "$O" --retry-failed >"$T/retry.txt" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "rerunning 1 failed" "$T/retry.txt" && ok || bad "retry exited $rc: $(cat "$T/retry.txt")"
cmp -s "$T/start0" "$O/.batch/tasks/0.start" && ok || bad "retry reran a job that was done"
for s in 1 2 3; do "$BS" validate "$O/sess$s/recording" >/dev/null 2>&1 && ok || bad "sess$s does not validate after retry"; done
"$BS" batch "$R" -o "$O" --status --json | $PY -c "import json,sys; c=json.load(sys.stdin)['counts']; assert c['done']==3 and c['failed']==0, c" \
  && ok || bad "status after retry"
"$BS" batch "$R" -o "$O" --retry-failed | grep -q "no failed job" && ok || bad "retry with nothing to retry"

finish
