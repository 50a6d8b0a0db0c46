#!/usr/bin/env bash
# test_openephys.sh - Open Ephys recordings written by `boundsort simulate
# --openephys` and .prb probe files, end to end through the command:
#   - info on the Neuropixels 1.0 folder (settings.xml geometry): stream,
#     columns, µV per bit, first sample, every position equal to probe.json's,
#     the stream list; the same answer for every form of REC; the LFP stream
#     with --stream; bad --stream values and a folder without geometry exit 2;
#   - sort: the Open Ephys folder and recording.bin + probe.json give
#     byte-identical Phy files (linear32 with --probe always; NP 1.0 with the
#     settings.xml geometry in the normal build, skipped under the sanitizers
#     where it takes minutes). Convention: spike_times.npy counts samples from
#     the first sample of continuous.dat, so it is the same for both; the
#     acquisition-clock sample is sample_numbers.npy[spike_times] (checked);
#   - .prb files (tests/data/prb) give the channels, positions and shank
#     grouping that Python's own exec of the file gives, and a .prb equal to
#     probe.json gives the same channels and (normal build) identical files.
. "$(dirname "$0")/lib.sh"
DATA=${BS_TEST_DATA:?}

"$BS" simulate -o "$T/np1" --probe np1 --duration 1 --units 10 --seed 5 --openephys -q || { echo "simulate np1 failed"; exit 1; }
# under the sanitizers (BS_SANITIZED=1, ~20x slower) a shorter linear32 recording
lin_duration=3
[ -n "${BS_SANITIZED:-}" ] && lin_duration=2
"$BS" simulate -o "$T/lin" --probe linear32 --duration $lin_duration --units 6 --seed 7 --openephys -q || { echo "simulate linear32 failed"; exit 1; }
NODE="$T/np1/openephys/Record Node 101"
REC="$NODE/experiment1/recording1"
AP="$REC/continuous/Neuropix-PXI-100.ProbeA-AP"

# ---- info ----
"$BS" info "$T/np1/openephys" --json >"$T/info.json" && ok || bad "info --json failed"
$PY - "$T/info.json" "$T/np1" <<'PY' && ok || bad "info values"
import json, sys
info = json.load(open(sys.argv[1])); d = sys.argv[2]
probe = json.load(open(f"{d}/probe.json"))["probes"][0]
rec = json.load(open(f"{d}/recording.json"))
errs = []
def need(c, what):
    if not c: errs.append(what)
need(info["format"] == "openephys" and info["stream"] == "ProbeA-AP", "format/stream")
need(info["n_cols"] == rec["n_chan"] + 1 and info["n_chan"] == rec["n_chan"], "channel counts (384 + sync)")
need(info["n_samples"] == rec["n_samples"] and info["fs_hz"] == 30000, "samples, rate")
need(info["first_sample"] == 1234567, f"first sample {info['first_sample']}")
need(info["probe"]["model"] == "NP1000", "model")
pos = dict(zip(probe["device_channel_indices"], probe["contact_positions"]))
for c in info["channels"]:
    need(pos[c["column"]] == [c["x_um"], c["y_um"]], f"position of column {c['column']}")
    need(c["uv_per_bit"] == rec["uv_per_bit"], f"uv_per_bit of column {c['column']}")
need([c["column"] for c in info["channels"]] == list(range(rec["n_chan"])), "columns 0..383")
kinds = [(s["name"], s["kind"], s["selected"]) for s in info["streams"]]
need(kinds == [("ProbeA-AP", "neural", True), ("ProbeA-LFP", "LFP", False), ("PXIe-6341", "no neural channels", False)],
     f"streams {kinds}")
print("\n".join(errs) or f"info: {len(info['channels'])} channels, first sample {info['first_sample']}, positions = probe.json")
sys.exit(1 if errs else 0)
PY
"$BS" info "$T/np1/openephys" >"$T/info.txt" && ok || bad "info (text) failed"
grep -q "^first sample   1234567" "$T/info.txt" && grep -q "^streams        ProbeA-AP (neural; 384 neural of 385" "$T/info.txt" \
  && ok || bad "info text: $(cat "$T/info.txt")"
# the ADC sampling delays of a Neuropixels part in its standard order (NP1000: slot / 13), as probe.json has them
grep -q "^ADC skew       0 .. 0.8462 samples" "$T/info.txt" && ok || bad "Open Ephys NP1: no ADC skew"
$PY - "$T/info.json" "$T/np1/probe.json" <<'PYEOF' && ok || bad "Open Ephys ADC delays differ from probe.json's"
import json, sys
a = json.load(open(sys.argv[1]))["probe"]["inter_sample_shift"]
b = json.load(open(sys.argv[2]))["probes"][0]["contact_annotations"]["inter_sample_shift"]
assert len(a) == len(b) == 384 and max(abs(x - y) for x, y in zip(a, b)) < 1e-6
PYEOF
# a four-shank probe: positions and shanks from settings.xml equal probe.json's
"$BS" simulate -o "$T/np24" --probe np2-4shank --duration 0.2 --units 4 --seed 9 --openephys -q && ok || bad "simulate np2-4shank"
"$BS" info "$T/np24/openephys" --json >"$T/np24.json" && ok || bad "info np2-4shank"
$PY - "$T/np24.json" "$T/np24/probe.json" <<'PY' && ok || bad "np2-4shank positions/shanks"
import json, sys
info = json.load(open(sys.argv[1])); p = json.load(open(sys.argv[2]))["probes"][0]
want = list(zip(p["device_channel_indices"], map(tuple, p["contact_positions"]), p["shank_ids"]))
got = [(c["column"], (c["x_um"], c["y_um"]), str(c["shank"])) for c in info["channels"]]
ok = want == got and info["probe"]["n_shanks"] == 4 and info["probe"]["model"] == "NP2013"
print(f"np2-4shank: {len(got)} channels on {info['probe']['n_shanks']} shanks, same as probe.json: {ok}")
sys.exit(0 if ok else 1)
PY
# every form of REC gives the same channels
for form in "$NODE" "$NODE/experiment1" "$REC" "$REC/structure.oebin" "$AP" "$AP/continuous.dat"; do
  "$BS" info "$form" --json >"$T/form.json" || { bad "info $form"; continue; }
  $PY -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(0 if a['channels']==b['channels'] and a['first_sample']==b['first_sample'] else 1)" \
    "$T/info.json" "$T/form.json" && ok || bad "info $form differs"
done
# the LFP stream: 1/12 of the rate and of the first sample number
"$BS" info "$REC" --stream ProbeA-LFP --json >"$T/lfp.json" && ok || bad "info --stream ProbeA-LFP"
$PY -c "
import json,sys; i=json.load(open(sys.argv[1])); r=json.load(open(sys.argv[2]))
sys.exit(0 if i['fs_hz']==2500 and i['first_sample']==1234567//12 and i['n_samples']==r['n_samples']//12 and i['n_chan']==384 else 1)" \
  "$T/lfp.json" "$T/np1/recording.json" && ok || bad "LFP stream values"
expect_fixed 2 "stream 'PXIe-6341' has no neural channels" "$BS" info "$REC" --stream PXIe-6341
expect_fixed 2 "no stream named 'ProbeB-AP': expected one of 'ProbeA-AP'" "$BS" info "$REC" --stream ProbeB-AP
expect_fixed 1 "option --stream: the value is empty" "$BS" info "$REC" --stream ""
expect_fixed 2 "no Neuropix-PXI or OneBox processor: the probe geometry is not in this file, give it with --probe FILE" \
  "$BS" info "$T/lin/openephys"
echo "channel_groups = {0: {'channels': [0, 384], 'geometry': {0: (0, 0), 384: (0, 20)}}}" >"$T/sync.prb"
expect_fixed 2 "probe channel 1 reads column 384 of stream 'ProbeA-AP', which is the sync channel 'AP_SYNC', expected a neural channel" \
  "$BS" info "$REC" --probe "$T/sync.prb"
# a probe file replaces settings.xml's geometry
"$BS" info "$REC" --probe "$DATA/prb/circus32.prb" --json >"$T/p32.json" && ok || bad "info --probe circus32.prb"
$PY -c "import json,sys; i=json.load(open(sys.argv[1])); sys.exit(0 if i['n_chan']==32 and i['channels'][31]['y_um']==775 and i['first_sample']==1234567 else 1)" \
  "$T/p32.json" && ok || bad "Open Ephys with a .prb"
cp -r "$REC" "$NODE/experiment1/recording2"
expect_fixed 2 "holds 2 Open Ephys recordings (experiment1/recording1, experiment1/recording2): name the one to open" \
  "$BS" info "$NODE"
rm -rf "$NODE/experiment1/recording2"

# ---- sort: Open Ephys folder vs recording.bin + probe.json ----
same_outputs() { # same_outputs A B WHAT
  local n=0
  for f in "$1"/*.npy "$1"/*.tsv; do
    n=$((n + 1))
    cmp -s "$f" "$2/$(basename "$f")" || { bad "$3: $(basename "$f") differs"; return; }
  done
  [ "$n" -ge 10 ] && ok || bad "$3: only $n output files"
}
LREC="$T/lin/openephys/Record Node 101/experiment1/recording1"
"$BS" sort "$T/lin/openephys" --probe "$T/lin/probe.json" -o "$T/s_oe" --threads 2 -q && ok || bad "sort linear32 Open Ephys failed"
"$BS" sort "$T/lin/recording.bin" --probe "$T/lin/probe.json" --fs 30000 --uv-per-bit 0.195 -o "$T/s_raw" --threads 2 -q \
  && ok || bad "sort linear32 raw failed"
same_outputs "$T/s_oe" "$T/s_raw" "linear32 Open Ephys vs raw"
# source.json names the stream read, and qc reopens the recording through it
$PY -c "import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if s['format']=='openephys' and s['stream']=='Rhythm Data' and s['open_options']['stream'] is None else 1)" \
  "$T/s_oe/source.json" && ok || bad "source.json of the Open Ephys sort: $(cat "$T/s_oe/source.json")"
cp "$T/s_oe/qc/qc_metrics.tsv" "$T/qc_first.tsv"
"$BS" qc "$T/s_oe" -q && cmp -s "$T/s_oe/qc/qc_metrics.tsv" "$T/qc_first.tsv" && ok || bad "qc rerun through source.json"
grep -q "n_channels_dat = 37" "$T/s_oe/params.py" && grep -qF "Rhythm Data/continuous.dat" "$T/s_oe/params.py" \
  && ok || bad "params.py of the Open Ephys sort: $(cat "$T/s_oe/params.py")"
$PY - "$T/s_oe" "$LREC/continuous/Acquisition_Board-100.Rhythm Data" <<'PY' && ok || bad "spike times to sample numbers"
import numpy as np, sys
st = np.load(f"{sys.argv[1]}/spike_times.npy"); sn = np.load(f"{sys.argv[2]}/sample_numbers.npy")
ok = len(st) > 0 and np.array_equal(sn[st], st + 1234567)
print(f"{len(st)} spikes; acquisition samples = spike_times + 1234567: {ok}")
sys.exit(0 if ok else 1)
PY
if [ -z "${BS_SANITIZED:-}" ]; then
  "$BS" sort "$T/np1/openephys" -o "$T/n_oe" --threads 2 -q --no-qc && ok || bad "sort NP1 Open Ephys failed"
  "$BS" sort "$T/np1/recording.bin" --probe "$T/np1/probe.json" --fs 30000 --uv-per-bit 2.34375 -o "$T/n_raw" --threads 2 -q --no-qc \
    && ok || bad "sort NP1 raw failed"
  same_outputs "$T/n_oe" "$T/n_raw" "NP1 Open Ephys (settings.xml geometry) vs raw"
fi

# ---- .prb files read as Python reads them ----
head -c $((40 * 2 * 64)) /dev/zero >"$T/zeros40.bin"
for prb in "$DATA"/prb/*.prb; do
  "$BS" info "$T/zeros40.bin" --probe "$prb" --fs 30000 --n-chan 40 --json >"$T/prb.json" || { bad "info --probe $prb"; continue; }
  $PY - "$prb" "$T/prb.json" <<'PY' && ok || bad "$prb differs from Python's reading"
import json, sys
ns = {}
src = open(sys.argv[1]).read()
src = "\n".join(l for l in src.splitlines() if not l.lstrip().startswith(("import ", "from ")))
exec(src, ns)
info = json.load(open(sys.argv[2]))
want = []  # (column, x, y, group key) in file order
for key, g in ns["channel_groups"].items():
    geo = g["geometry"]
    chans = list(g["channels"]) if "channels" in g else list(geo.keys())
    for c in chans:
        want.append((int(c), float(geo[c][0]), float(geo[c][1]), key))
got = [(c["column"], c["x_um"], c["y_um"], c["shank"]) for c in info["channels"]]
ok = [w[:3] for w in want] == [g[:3] for g in got]
keys = sorted({w[3] for w in want}, key=lambda k: (int(k) if all(str(x).lstrip("-").isdigit() for x in {w[3] for w in want}) else 0, str(k)))
ok = ok and all(keys.index(w[3]) == g[3] for w, g in zip(want, got))
print(f"{sys.argv[1].rsplit('/', 1)[1]}: {len(got)} channels, {info['probe']['n_shanks']} shanks: {'same as Python' if ok else 'DIFFERENT'}")
sys.exit(0 if ok else 1)
PY
done
# a .prb equal to probe.json sorts identically
$PY - "$T/lin/probe.json" "$T/lin.prb" <<'PY' || bad "writing lin.prb"
import json, sys
p = json.load(open(sys.argv[1]))["probes"][0]
geo = ", ".join(f"{d}: ({x!r}, {y!r})" for d, (x, y) in zip(p["device_channel_indices"], p["contact_positions"]))
open(sys.argv[2], "w").write(f"channel_groups = {{\n    0: {{'channels': {p['device_channel_indices']},\n        'geometry': {{{geo}}},}},\n}}\n")
PY
"$BS" info "$T/lin/recording.bin" --probe "$T/lin.prb" --fs 30000 --json >"$T/linprb.json" && ok || bad "info lin.prb"
"$BS" info "$T/lin/recording.bin" --probe "$T/lin/probe.json" --fs 30000 --json >"$T/linjson.json" && ok || bad "info lin probe.json"
$PY -c "import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); sys.exit(0 if a['channels']==b['channels'] else 1)" \
  "$T/linprb.json" "$T/linjson.json" && ok || bad "lin.prb and probe.json give different channels"
if [ -z "${BS_SANITIZED:-}" ]; then
  "$BS" sort "$T/lin/recording.bin" --probe "$T/lin.prb" --fs 30000 --uv-per-bit 0.195 -o "$T/s_prb" --threads 2 -q \
    && ok || bad "sort with lin.prb failed"
  same_outputs "$T/s_prb" "$T/s_raw" "linear32 .prb vs probe.json"
fi

finish
