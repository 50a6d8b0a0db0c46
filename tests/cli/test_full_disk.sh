# test_full_disk.sh - the output folder's disk (plan.h: disk planning; src/common/status.h: exit codes).
#  1. A 32-KiB tmpfs: `sort` refuses up front, exit 3 with the bytes, before creating OUT or reading data;
#     `plan -o` says the same.
#  2. --no-disk-check: the run goes on, a warning says so, and the full disk stops it with exit 6 (I/O
#     error) naming the failing file and "No space left on device", not 2 (bad input).
#  3. A stage boundary: a finished sort on a larger tmpfs, filled up afterwards; `--resume` with the match
#     stage's checkpoint gone is refused (exit 3, naming 'match') before that stage writes, with the real
#     counts, and every file already written is still there; with the space back it resumes to the same
#     output.
#  4. --keep-preprocessed on a raw file with a column the probe does not use: the plan counts the copy into
#     the Phy folder, and a disk with room for the sort but not the copy is refused up front.
#  5. run_summary.json: each stage's planned disk against what it wrote, and `du` of OUT against the plan
#     (release build only).
# Mounting needs root: skipped (77) where the mount fails.
. "$(dirname "$0")/lib.sh"

mkdir -p "$T/small" "$T/mid"
mount -t tmpfs -o size=32k tmpfs "$T/small" 2>/dev/null || { echo "skipped: cannot mount a tmpfs (needs root)"; exit 77; }
trap 'umount "$T/small" 2>/dev/null; umount "$T/mid" 2>/dev/null; umount "$T/keepfs" 2>/dev/null' EXIT
"$BS" simulate -o "$T/sim" --duration 3 --units 6 --probe linear32 -q >/dev/null 2>&1 ||
  { bad "simulate failed"; finish; exit; }
REC=("$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000)

# 1. refused up front
expect 3 "does not fit the disk: stages 'channels' to 'finish' and the quality metrics and the report write about .* MiB free" -- \
  "$BS" sort "${REC[@]}" -o "$T/small/out" -q
check "the refused sort created no output folder" test ! -e "$T/small/out"
expect 3 "does not fit the disk" -- "$BS" plan "${REC[@]}" -o "$T/small/out"
check "plan -o says DOES NOT FIT" grep -q "free there: DOES NOT FIT" "$T/out.txt"
expect 0 "" -- "$BS" plan "${REC[@]}" -o "$T/out-elsewhere"
check "plan -o on a roomy disk fits" grep -q "free there: fits" "$T/out.txt"

# 2. --no-disk-check: the full disk mid-run
expect_fixed 6 "No space left on device" -- \
  "$BS" sort "${REC[@]}" -o "$T/small/out" -q --no-disk-check
check "--no-disk-check warns" grep -qF "warning: --no-disk-check: does not fit the disk" "$T/err.txt"

# 3. a stage boundary, with the real counts
mount -t tmpfs -o size=64m tmpfs "$T/mid" || { bad "cannot mount the 64-MiB tmpfs"; finish; exit; }
expect 0 "" -- "$BS" sort "${REC[@]}" -o "$T/mid/out" -q --no-qc
cp "$T/mid/out/spike_times.npy" "$T/mid/out/spike_clusters.npy" "$T/mid/out/templates.npy" "$T/"
rm "$T/mid/out/.stages/match/spike_times.npy"
avail=$(df -B1 --output=avail "$T/mid" | tail -1)
fallocate -l $((avail - 96 * 1024)) "$T/mid/filler" 2>/dev/null ||
  dd if=/dev/zero of="$T/mid/filler" bs=4096 count=$(((avail - 96 * 1024) / 4096)) 2>/dev/null
find "$T/mid/out" -type f | sort | xargs md5sum >"$T/before.md5"
expect 3 "does not fit the disk: stages 'match' to 'finish' and the report write about" -- \
  "$BS" sort "${REC[@]}" -o "$T/mid/out" -q --no-qc --resume
check "the refusal at 'match' left every file in place" md5sum -c --quiet "$T/before.md5"
rm "$T/mid/filler"
expect 0 "" -- "$BS" sort "${REC[@]}" -o "$T/mid/out" -q --no-qc --resume
for f in spike_times.npy spike_clusters.npy templates.npy; do
  check "resumed $f equals the first run's" cmp -s "$T/$f" "$T/mid/out/$f"
done

# 4. --keep-preprocessed with a column the probe does not use: the copy into the Phy folder is planned
#    (n_samples x 33 float16 values, made while the stage file still exists); a disk with room for the sort
#    but not for the copy is refused up front, naming it; without the flag the same disk fits
"$PY" - "$T/sim/recording.bin" "$T/sync.bin" <<'PYEOF' || bad "could not write the 33-column recording"
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype=np.int16).reshape(-1, 32)
np.hstack([raw, np.zeros((raw.shape[0], 1), np.int16)]).tofile(sys.argv[2])
PYEOF
SYNC=("$T/sync.bin" --n-chan 33 --probe "$T/sim/probe.json" --fs 30000 --no-qc --no-report)
"$BS" plan "${SYNC[@]}" --json >"$T/nokeep.json" && "$BS" plan "${SYNC[@]}" --keep-preprocessed --json >"$T/keep.json" &&
  "$BS" plan "$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000 --no-qc --no-report --keep-preprocessed \
    --json >"$T/keep32.json" || bad "plan --json failed"
mid=$("$PY" - "$T/nokeep.json" "$T/keep.json" "$T/keep32.json" <<'PYEOF'
import json, sys
a, b, c = (json.load(open(f)) for f in sys.argv[1:4])
assert a["disk_keep_bytes"] == 0 and c["disk_keep_bytes"] == 0, (a["disk_keep_bytes"], c["disk_keep_bytes"])
assert b["disk_keep_bytes"] == 90000 * 33 * 2, b["disk_keep_bytes"]  # 3 s at 30 kHz, 33 columns
assert b["disk_bytes"] - a["disk_bytes"] == b["disk_keep_bytes"]
print(a["disk_bytes"] + b["disk_keep_bytes"] // 2)  # room for the sort, not for the copy
PYEOF
) && ok || bad "the plan's disk of --keep-preprocessed"
mkdir -p "$T/keepfs"
if [ -n "$mid" ] && mount -t tmpfs -o size=$(((mid + 65536) / 4096 * 4096)) tmpfs "$T/keepfs"; then
  expect 3 "does not fit the disk: stages 'channels' to 'finish' and the kept preprocessed recording write about" -- \
    "$BS" sort "${SYNC[@]}" -o "$T/keepfs/out" -q --keep-preprocessed
  check "the refused sort created no output folder" test ! -e "$T/keepfs/out"
  expect 0 "" -- "$BS" plan "${SYNC[@]}" -o "$T/keepfs/out"
  check "the same disk fits the sort without the flag" grep -q "free there: fits" "$T/out.txt"
  umount "$T/keepfs"
else
  bad "cannot mount the tmpfs for --keep-preprocessed"
fi

# 5. planned against written, on a fresh sort with its quality metrics (not under the sanitizers: time)
[ -n "${BS_SANITIZED:-}" ] && { finish; exit; }
expect 0 "" -- "$BS" sort "${REC[@]}" -o "$T/fresh" -q
du_out=$(du -sB1 "$T/fresh" | cut -f1)
check "run_summary: disk planned vs written" "$PY" - "$T/fresh/run_summary.json" "$du_out" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
du = int(sys.argv[2])
ok = True
for s in r["stages"]:
    w, p = s["disk_written_bytes"], s["disk_planned_bytes"]
    print(s["name"], "planned", p, "written", w)
    # the counts are real from 'match' on (K and the detected spikes known): the plan bounds what was written
    if s["name"] in ("match", "finish") and not (0 < w <= p <= 4 * w + 65536):
        print("stage", s["name"], "wrote", w, "planned", p); ok = False
plan = r["plan"]["disk_bytes"]
print("du", du, "plan", plan)
if not du <= plan:
    print("du", du, "more than the plan's", plan); ok = False
sys.exit(0 if ok else 1)
PYEOF
finish
