#!/bin/bash
# test_simulate.sh - `boundsort simulate` from the command line: bad usage gets a
# clear message and exit 1, an unwritable output folder exit 2, and a run with
# --spikeglx writes the ground-truth folder plus a SpikeGLX pair of the right size.
. "$(dirname "$0")/lib.sh"

expect 1 "unknown probe 'np3'" -- "$BS" simulate -o "$T/x" --probe np3
expect 1 "option --duration: expected a positive number of seconds" -- "$BS" simulate -o "$T/x" --duration -5
expect 1 "option --duration" -- "$BS" simulate -o "$T/x" --duration abc
expect 1 "option --units: expected a number of units" -- "$BS" simulate -o "$T/x" --units 0
expect 1 "option --units: expected a number of units in 1..2000" -- "$BS" simulate -o "$T/x" --units 5000
expect 1 "unknown drift 'sideways'" -- "$BS" simulate -o "$T/x" --drift sideways
expect 1 "output folder is missing" -- "$BS" simulate --probe np1
expect 1 "unknown option '--frobnicate'" -- "$BS" simulate -o "$T/x" --frobnicate 3
expect 1 "need a Neuropixels probe" -- "$BS" simulate -o "$T/x" --probe linear32 --spikeglx
expect 1 "option --seed" -- "$BS" simulate -o "$T/x" --seed
[ ! -e "$T/x" ] && ok || bad "a refused run created its output folder"

# an output folder below a regular file cannot be created: exit 2 naming it
touch "$T/plainfile"
expect 2 "plainfile" -- "$BS" simulate -o "$T/plainfile/out" --probe linear32 --duration 1 --units 2

# --help
"$BS" simulate --help >"$T/help.txt" 2>&1 && grep -q -- "--spikeglx" "$T/help.txt" && ok || bad "--help"

# a run with a SpikeGLX pair (NP2.0 single shank, 0.5 s)
out="$T/np2"
if "$BS" simulate -o "$out" --probe np2 --duration 0.5 --units 3 --seed 4 --drift step --spikeglx -q >"$T/run.txt" 2>&1; then
    ok
else
    bad "np2 run failed: $(cat "$T/run.txt")"
fi
for f in recording.bin probe.json recording.json gt_spike_times.npy gt_spike_units.npy gt_unit_positions.npy \
    gt_templates.npy gt_drift_um.npy spikeglx/sim_g0_t0.imec0.ap.bin spikeglx/sim_g0_t0.imec0.ap.meta; do
    [ -s "$out/$f" ] && ok || bad "missing $f"
done
size_rec=$(stat -c %s "$out/recording.bin" 2>/dev/null || echo 0)
size_bin=$(stat -c %s "$out/spikeglx/sim_g0_t0.imec0.ap.bin" 2>/dev/null || echo 0)
[ "$size_rec" -eq $((15000 * 384 * 2)) ] && ok || bad "recording.bin has $size_rec bytes"
[ "$size_bin" -eq $((15000 * 385 * 2)) ] && ok || bad "the SpikeGLX .bin has $size_bin bytes"
meta="$out/spikeglx/sim_g0_t0.imec0.ap.meta"
grep -q "^fileSizeBytes=$size_bin\$" "$meta" && ok || bad "fileSizeBytes does not match the .bin"
grep -q "^imDatPrb_type=2003\$" "$meta" && grep -q "^imDatPrb_pn=NP2003\$" "$meta" && ok || bad "NP2003 type/part"
grep -q "^nSavedChans=385\$" "$meta" && grep -q "^imMaxInt=2048\$" "$meta" && grep -q "^imChan0apGain=100\$" "$meta" \
    && ok || bad "meta scaling keys"
grep -q '^~muxTbl=(24,16)(0 1 32 33 64 65 ' "$meta" && ok || bad "NP2 muxTbl"
grep -q '"adc_mux":[[:space:]]*true' "$out/recording.json" && ok || bad "adc_mux in recording.json"
grep -q '"uv_per_bit":[[:space:]]*3.02734375' "$out/recording.json" && ok || bad "uv_per_bit in recording.json"
grep -q '"drift":[[:space:]]*"step"' "$out/recording.json" && ok || bad "drift kind in recording.json"

# the same seed again gives the same bytes; another seed does not
"$BS" simulate -o "$T/np2b" --probe np2 --duration 0.5 --units 3 --seed 4 --drift step --threads 1 -q >/dev/null 2>&1
cmp -s "$out/recording.bin" "$T/np2b/recording.bin" && ok || bad "same seed, different recording.bin"
"$BS" simulate -o "$T/np2c" --probe np2 --duration 0.5 --units 3 --seed 5 --drift step -q >/dev/null 2>&1
cmp -s "$out/recording.bin" "$T/np2c/recording.bin" && bad "another seed, same recording.bin" || ok

# --no-mux: every channel sampled at the nominal time, a different recording
"$BS" simulate -o "$T/np2m" --probe np2 --duration 0.5 --units 3 --seed 4 --drift step --no-mux -q >/dev/null 2>&1
grep -q '"adc_mux":[[:space:]]*false' "$T/np2m/recording.json" && ok || bad "--no-mux not recorded"
cmp -s "$out/recording.bin" "$T/np2m/recording.bin" && bad "--no-mux gave the same recording.bin" || ok

# four shanks: the meta has the NP2013 geometry header
out4="$T/np24"
"$BS" simulate -o "$out4" --probe np2-4shank --duration 0.2 --units 4 --spikeglx -q >/dev/null 2>&1 && ok || bad "np2-4shank run"
grep -q '^~snsGeomMap=(NP2013,4,250,70)(0:27:0:1)' "$out4/spikeglx/sim_g0_t0.imec0.ap.meta" && ok || bad "NP2013 geometry"
grep -q '^~imroTbl=(2013,384)(0 0 0 0 0)(1 0 0 0 1)' "$out4/spikeglx/sim_g0_t0.imec0.ap.meta" && ok || bad "NP2013 imro"

rm -rf "$T"
finish
