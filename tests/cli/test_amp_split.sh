#!/usr/bin/env bash
# test_amp_split.sh - two cells with one shape at two sizes: the finish stage splits the template's spikes by
# amplitude (docs/ALGORITHM.md §9.8).
# `boundsort simulate --probe linear32 --duration 60 --units 20 --seed 21` (the bench case bs-linear32-60s-20u)
# puts GT unit 0 (SNR 26) 2 um from GT unit 2 (SNR 6) with nearly the same waveform (cosine 0.97) at about four
# times its amplitude. Clustering learns one template for both; matching fits both cells' spikes to it, at two
# amplitudes. With the split:
#   - the run log counts templates split by amplitude;
#   - GT units 0 and 2 are both well detected (accuracy >= 0.8), with no false-positive unit.
# With both splits off (`split.min_dprime` and `split.feature_min_dprime` 0) one sorted unit holds both (GT 2
# "merged", GT 0 not well detected). With only the split by features on, it separates them too (the log counts
# a split by features, GT 0 well detected): the features scale with the amplitude, so the spikes' first
# principal axis of features runs along the two sizes.
. "$(dirname "$0")/lib.sh"
C=$T/case
check "simulate" "$BS" simulate -o "$C" --probe linear32 --duration 60 --units 20 --seed 21 -q
acc() { # OUT GT_UNIT: that unit's accuracy in `boundsort compare --json`
    "$BS" compare "$1" "$C" --json | $PY -c "import json,sys; r=json.load(sys.stdin); print([u['accuracy'] for u in r['units'] if u['gt_unit']==$2][0])"
}
fp() { "$BS" compare "$1" "$C" --json | $PY -c "import json,sys; print(json.load(sys.stdin)['n_false_positive'])"; }
ge() { $PY -c "import sys; sys.exit(0 if float('$1') >= float('$2') else 1)"; }
"$BS" sort "$C" --no-qc --no-report -o "$C/on" >"$T/on.log" 2>&1 && ok || bad "sort failed: $(tail -5 "$T/on.log")"
n=$(sed -n 's/.* \([0-9]*\) split by amplitude.*/\1/p' "$T/on.log")
[ "${n:-0}" -ge 1 ] && ok || bad "no template split by amplitude: $(grep 'split by' "$T/on.log")"
a0=$(acc "$C/on" 0) a2=$(acc "$C/on" 2)
ge "$a0" 0.8 && ge "$a2" 0.8 && ok || bad "split on: GT 0 accuracy $a0, GT 2 accuracy $a2 (want >= 0.8)"
[ "$(fp "$C/on")" = 0 ] && ok || bad "split on: $(fp "$C/on") false-positive units"
echo '{"split": {"min_dprime": 0, "feature_min_dprime": 0}}' >"$T/off.json"
"$BS" sort "$C" --no-qc --no-report --params "$T/off.json" -o "$C/off" >"$T/off.log" 2>&1 && ok ||
    bad "sort (split off) failed: $(tail -5 "$T/off.log")"
grep -q " 0 split by amplitude" "$T/off.log" && ok || bad "split off but: $(grep 'split by' "$T/off.log")"
b0=$(acc "$C/off" 0)
ge "$b0" 0.8 && bad "split off: GT 0 well detected ($b0): this recording no longer tests the split" || ok
echo '{"split": {"min_dprime": 0}}' >"$T/feat.json"
"$BS" sort "$C" --no-qc --no-report --params "$T/feat.json" -o "$C/feat" >"$T/feat.log" 2>&1 && ok ||
    bad "sort (split by features only) failed: $(tail -5 "$T/feat.log")"
n=$(sed -n 's/.* and \([0-9]*\) by features.*/\1/p' "$T/feat.log")
[ "${n:-0}" -ge 1 ] && ok || bad "no template split by features: $(grep 'split by' "$T/feat.log")"
c0=$(acc "$C/feat" 0)
ge "$c0" 0.8 && ok || bad "split by features only: GT 0 accuracy $c0 (want >= 0.8)"
finish
