#!/usr/bin/env bash
# test_preprocessed.sh - the preprocessed recording (src/preprocess/stage_preprocess.c): `sort
# --keep-preprocessed` leaves it in the Phy folder as OUT/preprocessed.dat (src/export/raw_copy.c), float16
# µV, time-major, n_samples x the raw file's columns, named by params.py (dtype 'float16', hp_filtered True),
# and its every sample equals an independent computation of the same chain with numpy
# and SciPy for each 2-s batch: the batch's window (2 s and 20 ms of context each side, the recording's
# first and last sample repeated past its ends, so that the short last batch is padded to the same length), each channel's mean over the window removed, the median over
# channels at each sample removed (numpy's median), scipy.signal.sosfiltfilt(butter(3, 300, 'highpass',
# fs=30000, output='sos')) along time, the batch's own samples kept.
# TOLERANCE: |file - reference| <= 2^-11 |reference| + 1e-3 µV: float16's rounding (11 significant bits)
# and float32 against float64 arithmetic in the filter (measured: at most 0.0625 µV, half a float16 unit
# at 128-256 µV); a
# wrong window, order, or batch offset gives errors of the order of the noise (µV to tens of µV).
# Without the flag the file is removed when the sort ends, and the outputs are the same bytes. A raw file
# with a column the probe does not use (a sync channel) gets the sorted channels in their columns and 0 in
# that one (the copy path); a completed sort resumed with the flag writes the file again, the same bytes.
# Streamed (src/pipeline/pre_stream.c): a disk budget (--disk) with room for the sort but not for the file
# makes the plan stream the preprocessed recording: no file is written, the outputs are the same bytes on 2
# and 3 threads (3: the stages that work on several batches at once fall back to one, with read-ahead), the
# plan and the run summary say so, and a resume that must read the recording again (match's checkpoint
# gone) streams it again or, with room, writes the file; both give the same bytes. A budget too small even
# streamed is refused up front (exit 3) naming --disk.
. "$(dirname "$0")/lib.sh"

"$BS" simulate -o "$T/sim" --probe linear32 --duration 5 --units 6 --seed 3 -q || { echo "simulate failed"; exit 1; }
REC=("$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000 --dtype int16 --uv-per-bit 0.195 --no-qc
     --no-report -q)
"$BS" sort "${REC[@]}" -o "$T/keep" --keep-preprocessed && ok || bad "sort --keep-preprocessed failed"
F="$T/keep/preprocessed.dat"
[ -f "$F" ] && [ "$(stat -c %s "$F")" = $((32 * 150000 * 2)) ] && ok ||
  bad "preprocessed.dat: expected 32 x 150000 float16 values"
[ ! -e "$T/keep/.stages/preprocess/recording.f16" ] && ok || bad "the stage's recording.f16 left beside it"
# params.py names it: dat_path, n_channels_dat, dtype, offset, hp_filtered
params_name() { # DIR NCOLS
  grep -qx "dat_path = 'preprocessed.dat'" "$1/params.py" && grep -qx "n_channels_dat = $2" "$1/params.py" &&
    grep -qx "dtype = 'float16'" "$1/params.py" && grep -qx "offset = 0" "$1/params.py" &&
    grep -qx "hp_filtered = True" "$1/params.py" && grep -q "^sample_rate = 30000" "$1/params.py"
}
params_name "$T/keep" 32 && ok || bad "params.py does not name preprocessed.dat: $(cat "$T/keep/params.py")"
"$BS" validate "$T/keep" >/dev/null && ok || bad "validate refuses the folder with preprocessed.dat"
"$PY" - "$T/sim/recording.bin" "$F" <<'PYEOF' && ok || bad "recording.f16 differs from numpy/SciPy's preprocessing"
import sys
import numpy as np
from scipy.signal import butter, sosfiltfilt
raw = np.fromfile(sys.argv[1], dtype=np.int16).reshape(-1, 32).astype(np.float64) * np.float32(0.195)
got = np.fromfile(sys.argv[2], dtype=np.float16).reshape(-1, 32).astype(np.float64)
T, nb, halo = raw.shape[0], 60000, 600
sos = butter(3, 300, "highpass", fs=30000, output="sos")
worst = 0.0
for b in range((T + nb - 1) // nb):
    idx = np.clip(np.arange(b * nb - halo, (b + 1) * nb + halo), 0, T - 1)  # a short last batch too
    w = raw[idx].astype(np.float32).astype(np.float64)
    w = w - w.mean(axis=0)
    w = w - np.median(w, axis=1, keepdims=True)
    y = sosfiltfilt(sos, w, axis=0)[halo:halo + min(T, (b + 1) * nb) - b * nb]
    g = got[b * nb:b * nb + y.shape[0]]
    excess = np.abs(g - y) - (2.0 ** -11 * np.abs(y) + 1e-3)
    worst = max(worst, float(excess.max()))
    print(f"batch {b}: max |diff| {np.abs(g - y).max():.2e} uV, noise RMS {y.std():.1f} uV")
sys.exit(0 if worst <= 0 else 1)
PYEOF
"$BS" sort "${REC[@]}" -o "$T/plain" && ok || bad "sort failed"
[ ! -e "$T/plain/.stages/preprocess/recording.f16" ] && ok || bad "recording.f16 left without --keep-preprocessed"
for f in "$T"/keep/*.npy "$T"/keep/*.tsv; do
  cmp -s "$f" "$T/plain/$(basename "$f")" || bad "$(basename "$f") differs with --keep-preprocessed"
done
ok
# a 33rd column (a sync channel: the probe has 32): copied into 33-column rows, the sync column 0
"$PY" - "$T/sim/recording.bin" "$T/sync.bin" <<'PYEOF' || bad "could not write the 33-column recording"
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype=np.int16).reshape(-1, 32)
sync = ((np.arange(raw.shape[0]) // 15000) % 2 * 64).astype(np.int16)[:, None]
np.hstack([raw, sync]).tofile(sys.argv[2])
PYEOF
"$BS" sort "$T/sync.bin" --n-chan 33 "${REC[@]:1}" -o "$T/sync" --keep-preprocessed && ok ||
  bad "sort of the 33-column recording failed"
params_name "$T/sync" 33 && ok || bad "params.py (33 columns): $(cat "$T/sync/params.py")"
"$PY" - "$F" "$T/sync/preprocessed.dat" <<'PYEOF' && ok || bad "preprocessed.dat of 33 columns: wrong columns"
import sys
import numpy as np
a = np.fromfile(sys.argv[1], dtype=np.uint16).reshape(-1, 32)
b = np.fromfile(sys.argv[2], dtype=np.uint16).reshape(-1, 33)
sys.exit(0 if a.shape[0] == b.shape[0] and (b[:, :32] == a).all() and (b[:, 32] == 0).all() else 1)
PYEOF
cmp -s "$T/sync/spike_times.npy" "$T/keep/spike_times.npy" && ok || bad "the sync column changed the sorting"

# streamed: a disk budget between the sort's need without the file and with it
NOQ=(); for a in "${REC[@]}"; do [ "$a" = -q ] || NOQ+=("$a"); done
"$BS" plan "${NOQ[@]}" --json >"$T/plan.json" || bad "plan --json failed"
read -r need file <<<"$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1]))
print(d["disk_bytes"], d["preprocessed_file_bytes"])' "$T/plan.json")"
[ "$file" = $((32 * 150000 * 2)) ] && ok || bad "plan: preprocessed_file_bytes $file, expected $((32 * 150000 * 2))"
DISK=(--disk $((need - file / 2)))
"$BS" plan "${NOQ[@]}" --threads 3 --json >"$T/plan_3.json" &&
  "$PY" -c 'import json,sys; sys.exit(0 if any(s["lanes"] > 1 for s in json.load(open(sys.argv[1]))["stages"]) else 1)' \
    "$T/plan_3.json" && ok || bad "plan on 3 threads: no stage works on several batches at once"
"$BS" plan "${NOQ[@]}" "${DISK[@]}" --threads 3 --json >"$T/plan_s.json" &&
  "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); p = {s["name"]: s for s in d["stages"]}
sys.exit(0 if d["preprocessed_streamed"] and d["disk_budgeted"] and p["preprocess"]["disk_bytes"] < 65536
         and p["preprocess"]["strategy"].startswith("streamed") and d["disk_bytes"] <= d["disk_free_bytes"]
         and all(s["lanes"] == 1 for s in d["stages"]) else 1)' "$T/plan_s.json" && ok ||
  bad "plan --disk: not streamed: $(cat "$T/plan_s.json")"
for th in 2 3; do
  "$BS" sort "${REC[@]}" "${DISK[@]}" --threads $th -o "$T/stream$th" && ok || bad "streamed sort ($th threads) failed"
  for f in "$T"/plain/*.npy "$T"/plain/*.tsv; do
    cmp -s "$f" "$T/stream$th/$(basename "$f")" || bad "$(basename "$f") differs streamed ($th threads)"
  done
  "$PY" -c 'import json,sys; s = {x["name"]: x for x in json.load(open(sys.argv[1]))["stages"]}
p = s["preprocess"]
sys.exit(0 if p["strategy"].startswith("streamed") and p["disk_written_bytes"] < 65536 else 1)' \
    "$T/stream$th/run_summary.json" && ok || bad "run_summary: the preprocess stage not streamed ($th threads)"
done
[ ! -e "$T/stream2/.stages/preprocess/recording.f16" ] && ok || bad "a streamed sort left recording.f16"
cp -r "$T/stream2" "$T/stream_file"
rm "$T/stream2/.stages/match/spike_times.npy" "$T/stream_file/.stages/match/spike_times.npy"
"$BS" sort "${NOQ[@]}" "${DISK[@]}" -o "$T/stream2" --resume 2>"$T/resume.txt" && ok || bad "streamed resume failed"
grep -q "streamed instead" "$T/resume.txt" && ! grep -q "written again" "$T/resume.txt" && ok ||
  bad "the streamed resume did not stream: $(cat "$T/resume.txt")"
"$BS" sort "${NOQ[@]}" -o "$T/stream_file" --resume 2>"$T/resume.txt" && ok || bad "resume with room failed"
grep -q "written again" "$T/resume.txt" && ok || bad "the resume with room did not write the file again"
for d in stream2 stream_file; do
  for f in "$T"/plain/*.npy; do
    cmp -s "$f" "$T/$d/$(basename "$f")" || bad "$(basename "$f") differs after the resume ($d)"
  done
done
expect 3 "does not fit the disk: .* even with the preprocessed recording streamed (not written).* the disk budget (--disk) is" \
  -- "$BS" sort "${REC[@]}" --disk 4096 -o "$T/tiny"
check "the refused sort created no output folder" test ! -e "$T/tiny"
# streaming needs more memory than writing the file: a budget that holds the file's plan (each stage's
# smallest strategy) but not the stream's is refused up front, saying why
mem=$("$PY" -c 'import json,sys; print(max(s["min_peak_bytes"] for s in json.load(open(sys.argv[1]))["stages"]) + 1)' \
  "$T/plan.json")
"$BS" plan "${NOQ[@]}" --mem "$mem" >/dev/null && ok || bad "plan --mem $mem (the file's plan) does not fit"
expect 3 "does not fit the disk with the preprocessed recording's file .* and streaming that recording instead does not fit the memory budget" \
  -- "$BS" sort "${REC[@]}" "${DISK[@]}" --mem "$mem" -o "$T/memshort"
check "the refused sort created no output folder" test ! -e "$T/memshort"
# the completed sort without the file, resumed with the flag: written again, the same bytes
"$BS" sort "${REC[@]}" -o "$T/plain" --resume --keep-preprocessed && ok || bad "sort --resume --keep-preprocessed failed"
cmp -s "$T/plain/preprocessed.dat" "$F" && params_name "$T/plain" 32 && ok ||
  bad "the resumed sort's preprocessed.dat differs or params.py does not name it"
finish
