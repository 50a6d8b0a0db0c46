#!/usr/bin/env bash
# test_qc.sh - boundsort qc end to end.
#  A. sort a short simulated recording (qc runs at its end): source.json, qc_metrics.tsv, one
#     cluster_<metric>.tsv per metric, cluster_qc_label.tsv and curation.json (format v2) exist and
#     agree with each other and with the spikes (num_spikes, firing_rate); the folder still validates;
#     `boundsort qc OUT` (through source.json, other thread count) and `--recording` (with units
#     gathered in small groups) give the same bytes; relaxed thresholds change the labels as the rule says; --no-qc skips qc; bad inputs exit 2 with a clear message, bad usage exits 1.
#  B. a perfect sorting (the ground truth written as a Phy folder, with spike_positions.npy holding a
#     known 20 µm depth ramp) plus two bad units (a Poisson unit with doublets 0.6 ms apart, a
#     unit present in the first 20 % only): every well-sampled ground-truth unit is labelled good, the
#     bad ones fail, and the drift metrics measure the ramp.
. "$(dirname "$0")/lib.sh"
$PY -c "import numpy" 2>/dev/null || { echo "skipped: python3 with numpy is needed (scripts/deps.sh installs it)"; exit 77; }

# Under the sanitizers (BS_SANITIZED=1, about 20x slower) shorter recordings exercise the same code.
dur_a=20; dur_b=120; bin_b=60
[ -n "${BS_SANITIZED:-}" ] && { dur_a=12; dur_b=40; bin_b=10; }

# ---------------------------------------------------------------- A. sort + qc
"$BS" simulate -o "$T/sim" --probe linear32 --duration $dur_a --units 8 --seed 11 -q || { echo "simulate failed"; exit 1; }
REC=("$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000 --uv-per-bit 0.195)
"$BS" sort "${REC[@]}" -o "$T/out" --threads 2 -q && ok || bad "sort failed"
"$BS" validate "$T/out" >/dev/null && ok || bad "validate fails after qc"
$PY - "$T/out" "$T/sim" <<'PYEOF' && ok || bad "qc outputs inconsistent"
import json, sys, numpy as np
out, sim = sys.argv[1], sys.argv[2]
names = ["num_spikes", "firing_rate", "presence_ratio", "isi_violations_ratio", "isi_violations_count",
         "rp_contamination", "rp_violations", "sliding_rp_violation", "amplitude_cutoff", "amplitude_median", "snr",
         "isolation_distance", "l_ratio", "d_prime", "nn_hit_rate", "nn_miss_rate", "silhouette", "drift_ptp",
         "drift_std", "drift_mad", "max_drift", "cumulative_drift",
         "num_positive_peaks", "num_negative_peaks", "peak_to_trough_duration", "trough_half_width", "peak_half_width",
         "repolarization_slope", "recovery_slope", "main_to_next_extremum_duration", "peak_before_to_trough_ratio",
         "peak_after_to_trough_ratio", "peak_before_to_peak_after_ratio", "main_peak_to_trough_ratio", "trough_width",
         "peak_before_width", "peak_after_width", "waveform_baseline_flatness", "exp_decay"]
def tsv(name):
    lines = open(f"{out}/{name}").read().splitlines()
    return lines[0].split("\t"), [l.split("\t") for l in lines[1:]]
h, rows = tsv("qc/qc_metrics.tsv")
assert h == ["cluster_id"] + names, h
ids = [int(r[0]) for r in rows]
clu = np.load(f"{out}/spike_clusters.npy"); t = np.load(f"{out}/spike_times.npy")
groups = [int(l.split("\t")[0]) for l in open(f"{out}/cluster_group.tsv").read().splitlines()[1:]]
assert sorted(set(clu.tolist()) | set(groups)) == ids, "rows != cluster ids"
src = json.load(open(f"{out}/source.json"))
n_samples = src["n_samples"]; fs = src["fs_hz"]
assert src["recording"].endswith("recording.bin") and src["n_chan"] == 32 and src["open_options"]["uv_per_bit"] == 0.195
m = {int(r[0]): dict(zip(names, map(float, r[1:]))) for r in rows}
for u in ids:
    n = int(np.sum(clu == u))
    assert m[u]["num_spikes"] == n, (u, m[u]["num_spikes"], n)
    if n:
        assert abs(m[u]["firing_rate"] - n / (n_samples / fs)) < 1e-9 * n, u
        assert 0 <= m[u]["presence_ratio"] <= 1 or np.isnan(m[u]["presence_ratio"])
        assert m[u]["snr"] > 0 and m[u]["nn_hit_rate"] <= 1
for k, name in enumerate(names):
    hh, rr = tsv(f"cluster_{name}.tsv")
    assert hh == ["cluster_id", name], hh
    assert [int(r[0]) for r in rr] == ids and [r[1] for r in rr] == [r[k + 1] for r in rows], name
hh, rr = tsv("cluster_qc_label.tsv")
assert hh == ["cluster_id", "qc_label"] and [int(r[0]) for r in rr] == ids
lab = {int(r[0]): r[1] for r in rr}
assert set(lab.values()) <= {"good", "fail", "unknown"}
for u in ids:  # the Allen rule: a computed metric out of bounds fails, else a NaN one is unknown
    v = m[u]
    isi, pr, cut = v["isi_violations_ratio"], v["presence_ratio"], v["amplitude_cutoff"]
    fails = (isi == isi and not isi < 0.5) or (pr == pr and not pr > 0.8) or (cut == cut and not cut < 0.1)
    want = "fail" if fails else "unknown" if np.isnan([isi, pr, cut]).any() else "good"
    assert lab[u] == want, (u, lab[u], want, isi, pr, cut)
c = json.load(open(f"{out}/curation.json"))
assert c["format_version"] == "2" and c["unit_ids"] == ids
assert c["label_definitions"]["qc_label"]["label_options"] == ["good", "fail", "unknown"]
assert c["label_definitions"]["quality"]["exclusive"] is True
assert c["merges"] == [] and c["splits"] == [] and c["removed"] == []
ut = {int(l.split("\t")[0]): l.split("\t")[1] for l in open(f"{out}/cluster_unit_type.tsv").read().splitlines()[1:]}
assert sorted(ut) == ids and set(ut.values()) <= {"noise", "non-somatic", "mua", "good"}
assert c["label_definitions"]["unit_type"]["label_options"] == ["noise", "non-somatic", "mua", "good"]
for e in c["manual_labels"]:
    assert e["unit_id"] in ids and e["labels"]["qc_label"] == [lab[e["unit_id"]]]
    assert e["labels"]["unit_type"] == [ut[e["unit_id"]]]
    assert e["labels"].get("quality", ["good"])[0] in ("good", "mua", "noise")
assert len(c["manual_labels"]) == len(ids)
print(f"{len(ids)} units, {sum(l == 'good' for l in lab.values())} good")
PYEOF
mkdir -p "$T/first/qc"; cp "$T"/out/*.tsv "$T/out/curation.json" "$T/first/"; cp "$T/out/qc/qc_metrics.tsv" "$T/first/qc/"
"$BS" qc "$T/out" --threads 1 -q && ok || bad "qc through source.json failed"
for f in "$T"/first/* "$T/first/qc/qc_metrics.tsv"; do
  [ -f "$f" ] || continue
  cmp -s "$f" "$T/out/${f#"$T/first/"}" && ok || bad "${f#"$T/first/"} differs on rerun (1 thread)"
done
cp "$T/out/qc/qc_metrics.tsv" "$T/out/qc_metrics.tsv"  # where earlier builds wrote it: read_phy merged it twice
"$BS" qc "$T/out" --recording "${REC[@]}" --group-spikes 50 -q && ok || bad "qc --recording failed"
[ ! -e "$T/out/qc_metrics.tsv" ] && ok || bad "qc left an earlier build's top-level qc_metrics.tsv"
cmp -s "$T/first/qc/qc_metrics.tsv" "$T/out/qc/qc_metrics.tsv" && ok || bad "qc --recording --group-spikes 50 gives other metrics"
"$BS" qc "$T/out" --presence-bin-s 10 --cutoff-max 1 --presence-min 0 --isi-max 1e9 -q && ok || bad "qc with thresholds failed"
$PY - "$T/out" <<'PYEOF' && ok || bad "relaxed thresholds: good must mean 'amplitude_cutoff is not NaN', unknown that it is"
import sys
out = sys.argv[1]
lines = open(f"{out}/qc/qc_metrics.tsv").read().splitlines()
col = lines[0].split("\t").index("amplitude_cutoff")
cut = {l.split("\t")[0]: l.split("\t")[col] for l in lines[1:]}
lab = dict(l.split("\t") for l in open(f"{out}/cluster_qc_label.tsv").read().splitlines()[1:])
assert all(lab[u] == ("good" if cut[u] != "nan" else "unknown") for u in cut), (cut, lab)
print(f"relaxed thresholds: {sum(v == 'unknown' for v in lab.values())} of {len(lab)} units unknown (no amplitude cutoff)")
PYEOF
# --no-qc: a resumed copy of the sort (every stage skipped) removes the earlier run's qc files (stale
# tables would be joined with the new clusters by Phy and SpikeInterface's read_phy)
cp -r "$T/out" "$T/noqc"
"$BS" sort "${REC[@]}" -o "$T/noqc" --resume --no-qc -q \
  && [ -f "$T/noqc/source.json" ] && [ ! -e "$T/noqc/qc/qc_metrics.tsv" ] && [ ! -e "$T/noqc/curation.json" ] \
  && [ ! -e "$T/noqc/cluster_qc_label.tsv" ] && [ ! -e "$T/noqc/cluster_snr.tsv" ] && [ ! -e "$T/noqc/cluster_unit_type.tsv" ] \
  && [ ! -e "$T/noqc/cluster_exp_decay.tsv" ] && [ -f "$T/noqc/cluster_KSLabel.tsv" ] && ok \
  || bad "sort --no-qc left qc files: $(ls "$T/noqc")"

# bad inputs
expect 2 "No such file" "$BS" qc "$T/missing"
mkdir -p "$T/empty_dir"
expect 2 "not a Phy folder" "$BS" qc "$T/empty_dir"
cp -r "$T/out" "$T/norec"; sed -i 's#recording.bin"#gone.bin"#' "$T/norec/source.json"
expect 2 "cannot open the recording" "$BS" qc "$T/norec"
cp -r "$T/out" "$T/nosrc"; rm "$T/nosrc/source.json"
expect 2 "give it with --recording" "$BS" qc "$T/nosrc"
cp -r "$T/out" "$T/nospikes"
$PY -c "import numpy as np; np.save('$T/nospikes/spike_times.npy', np.zeros(0, np.int64)); np.save('$T/nospikes/spike_clusters.npy', np.zeros(0, np.int32))"
expect 2 "no spikes" "$BS" qc "$T/nospikes"
"$BS" simulate -o "$T/short" --probe linear32 --duration 2 --units 2 --seed 1 -q
expect 2 "outside the recording" "$BS" qc "$T/out" --recording "$T/short/recording.bin" --probe "$T/short/probe.json" --fs 30000
expect 2 "sampled at" "$BS" qc "$T/out" --recording "${REC[@]:0:3}" --fs 20000
expect 3 "budget" "$BS" qc "$T/out" --mem 2M
expect 1 "unknown option" "$BS" qc "$T/out" --bogus 1
expect 1 "need --recording" "$BS" qc "$T/out" --fs 30000
expect 1 "missing the output folder" "$BS" qc

# ------------------------------------------------- B. labels on a perfect sorting
"$BS" simulate -o "$T/gt" --probe linear32 --duration $dur_b --units 6 --seed 4 -q || { echo "simulate failed"; exit 1; }
$PY - "$T/gt" "$T/gtout" <<'PYEOF' || bad "building the ground-truth Phy folder failed"
import json, os, sys, numpy as np
gt, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
meta = json.load(open(f"{gt}/recording.json"))
fs, T = meta["fs_hz"], meta["n_samples"]
t = np.load(f"{gt}/gt_spike_times.npy"); u = np.load(f"{gt}/gt_spike_units.npy")
U = int(u.max()) + 1
rng = np.random.default_rng(7)
noise = rng.integers(0, T, int(20 * T / fs))                      # 20 Hz Poisson with doublets 0.6 ms apart
noise = np.unique(np.concatenate([noise, noise[::2] + int(0.6e-3 * fs)]))
noise = noise[noise < T]
first = np.cumsum(rng.exponential(0.1, 1000) + 0.003) * fs         # 10 Hz with a 3 ms dead time ...
first = np.unique(first[first < 0.2 * T].astype(np.int64))       # ... in the first 20 % only
t = np.concatenate([t, noise, first]); u = np.concatenate([u, np.full(len(noise), U), np.full(len(first), U + 1)])
o = np.lexsort((u, t)); t, u = t[o].astype(np.int64), u[o].astype(np.int32)
np.save(f"{out}/spike_times.npy", t); np.save(f"{out}/spike_clusters.npy", u)
pos = np.load(f"{gt}/gt_unit_positions.npy")
probe = json.load(open(f"{gt}/probe.json"))["probes"][0]
xy = np.array(probe["contact_positions"], dtype=np.float32)
np.save(f"{out}/channel_positions.npy", xy); np.save(f"{out}/channel_map.npy", np.arange(len(xy), dtype=np.int32))
# depths: the unit's depth + a 20 µm ramp over the recording + 2 µm noise
ramp = 20.0 * t / T
y = np.where(u < U, pos[np.minimum(u, U - 1), 1], 100.0) + ramp + rng.normal(0, 2, len(t))
np.save(f"{out}/spike_positions.npy", np.stack([np.zeros(len(t)), y], 1).astype(np.float32))
open(f"{out}/params.py", "w").write(f"dat_path = '{gt}/recording.bin'\nn_channels_dat = {len(xy)}\n"
                                     f"dtype = 'int16'\noffset = 0\nsample_rate = {fs}\nhp_filtered = False\n")
PYEOF
"$BS" qc "$T/gtout" --recording "$T/gt/recording.bin" --probe "$T/gt/probe.json" --fs 30000 --uv-per-bit 0.195 \
  --presence-bin-s $bin_b --drift-interval-s $bin_b -q && ok || bad "qc on the ground-truth folder failed"
$PY - "$T/gt" "$T/gtout" "${BS_SANITIZED:-}" <<'PYEOF' && ok || bad "labels or drift of the perfect sorting are wrong"
import json, sys, numpy as np
gt, out, sanitized = sys.argv[1], sys.argv[2], sys.argv[3]
meta = json.load(open(f"{gt}/recording.json"))
U = meta["n_units"]
lines = open(f"{out}/qc/qc_metrics.tsv").read().splitlines()
h = lines[0].split("\t")
m = {int(l.split("\t")[0]): dict(zip(h[1:], map(float, l.split("\t")[1:]))) for l in lines[1:]}
lab = {int(l.split("\t")[0]): l.split("\t")[1] for l in open(f"{out}/cluster_qc_label.tsv").read().splitlines()[1:]}
# the bad units fail, each for its own reason
assert lab[U] == "fail" and m[U]["isi_violations_ratio"] > 0.5, m[U]
assert lab[U + 1] == "fail" and m[U + 1]["presence_ratio"] <= 0.8, m[U + 1]
checked = 0
for unit in meta["units"]:
    i, n, amp = unit["id"], unit["n_spikes"], unit["peak_amplitude_uv"]
    if n >= 600 and amp >= 60:          # enough spikes for amplitude_cutoff, well above the 10 µV noise
        checked += 1
        assert lab[i] == "good", (i, m[i])
        assert m[i]["isi_violations_ratio"] < 0.05 and m[i]["presence_ratio"] == 1.0, m[i]
        assert m[i]["snr"] > 3 and m[i]["nn_hit_rate"] > 0.8 and m[i]["isolation_distance"] > 20, m[i]
    if not sanitized and m[i]["num_spikes"] >= 300:   # >= 100 spikes in each 60 s drift interval
        # a 20 µm ramp over 120 s: medians at 30 s and 90 s differ by 10 µm; Allen's 100 s intervals from the
        # first spike: medians near 50 s and 110 s -> also about 10 µm
        assert abs(m[i]["drift_ptp"] - 10.0) < 1.5, (i, m[i]["drift_ptp"])
        assert abs(m[i]["max_drift"] - 10.0) < 2.5 and abs(m[i]["cumulative_drift"] - m[i]["max_drift"]) < 1e-9, m[i]
if not sanitized:
    assert checked >= 2, f"only {checked} well-sampled units: the test checks too little"
print(f"{checked} well-sampled units good; bad units fail")
PYEOF

finish
