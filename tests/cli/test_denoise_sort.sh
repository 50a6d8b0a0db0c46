#!/usr/bin/env bash
# test_denoise_sort.sh - sort --denoise cmr | cmr-local | destripe (preprocess.h) on a four-shank
# Neuropixels 2.0 simulation with planted bad channels (interpolated first):
#   - each completes and validates; run_summary.json and params.json record the choice; destripe's halo
#     holds the gain control's reach (0.05 s) besides the high-pass's;
#   - each finds ground-truth units (well detected at least half of what the global median finds,
#     and at least 8 of 30);
#   - cmr-local and destripe give the same bytes on 1 and 2 threads;
#   - a bad value is a usage error (exit 1).
# The kernels themselves are checked against SpikeInterface in test_denoise_si.sh and test_denoise.c.
# Under the sanitizers (BS_SANITIZED, ~20x slower): a 3-s recording, each mode sorted once (validated,
# recorded), without the accuracy and thread comparisons.
. "$(dirname "$0")/lib.sh"
san=${BS_SANITIZED:-}
dur=8; [ -n "$san" ] && dur=3

"$BS" simulate -o "$T/sim" --probe np2-4shank --duration $dur --units 30 --seed 21 --dead-channels 2 \
  --noisy-channels 2 -q >/dev/null || bad "simulate"
declare -A well
for d in cmr cmr-local destripe; do
  O=$T/o_$d
  "$BS" sort "$T/sim" -o "$O" --threads 2 -q --no-report --no-qc --denoise $d 2>"$T/err.txt" \
    && ok || bad "sort --denoise $d: $(cat "$T/err.txt")"
  "$BS" validate "$O" >"$T/val.txt" 2>&1 && ok || bad "--denoise $d: validate: $(cat "$T/val.txt")"
  "$PY" - "$O" $d <<'PYEOF' && ok || bad "--denoise $d: run_summary / params.json"
import json, sys
out, d = sys.argv[1:]
r = json.load(open(f"{out}/run_summary.json"))
assert r["denoise"] == d and r["bad_channels"]["interpolated"] == 4, (r["denoise"], r["bad_channels"])
p = json.load(open(f"{out}/params.json"))
assert p["preprocess"]["denoise"] == {"cmr": 0, "cmr-local": 1, "destripe": 2}[d], p["preprocess"]
PYEOF
  [ -n "$san" ] && continue
  well[$d]=$("$BS" compare "$O" "$T/sim" --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["n_well_detected"])')
  echo "--denoise $d: ${well[$d]} of 30 well detected"
done
[ -n "$san" ] && { expect 1 "--denoise: expected cmr, cmr-local or destripe, got 'car'" -- "$BS" sort "$T/sim" -o "$T/x" --denoise car; finish; exit; }
for d in cmr-local destripe; do
  [ "${well[$d]}" -ge 8 ] && [ $((2 * ${well[$d]})) -ge ${well[cmr]} ] && ok \
    || bad "--denoise $d: ${well[$d]} well detected (cmr: ${well[cmr]})"
done
# destripe's halo: 20 ms for the high-pass plus the gain control's 0.05 s
h=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["batch"]["halo_samples"])' "$T/o_destripe/params.json")
[ "$h" -ge 2100 ] && ok || bad "destripe's halo is $h samples, expected at least 2100"

for d in cmr-local destripe; do
  "$BS" sort "$T/sim" -o "$T/t1_$d" --threads 1 -q --no-report --no-qc --denoise $d 2>"$T/err.txt" \
    || bad "sort --denoise $d --threads 1: $(cat "$T/err.txt")"
  same=1
  for f in spike_times.npy spike_clusters.npy templates.npy amplitudes.npy whitening_mat.npy; do
    cmp -s "$T/o_$d/$f" "$T/t1_$d/$f" || { same=0; echo "--denoise $d: $f differs between 1 and 2 threads"; }
  done
  [ $same = 1 ] && ok || bad "--denoise $d: outputs depend on the thread count"
done

expect 1 "--denoise: expected cmr, cmr-local or destripe, got 'car'" -- "$BS" sort "$T/sim" -o "$T/x" --denoise car
finish
