#!/usr/bin/env bash
# test_spikeglx_info.sh - a simulated Neuropixels recording written as a SpikeGLX
# pair is read by boundsort info: the sorted channels (the reference channel
# excluded), rate, sample count, µV per bit and every channel's position agree
# with the simulator's recording.json and probe.json.
. "$(dirname "$0")/lib.sh"

for probe in np1 np2-4shank; do
  d="$T/$probe"
  "$BS" simulate -o "$d" --probe $probe --duration 1 --units 5 --seed 2 --spikeglx -q
  check "no $d/spikeglx/sim_g0_t0.imec0.ap.meta" [ -f "$d/spikeglx/sim_g0_t0.imec0.ap.meta" ]
  "$BS" info "$d/spikeglx/sim_g0_t0.imec0.ap.bin" >"$d/info.txt"; check "info $probe exited $?" [ $? = 0 ]
  "$BS" info "$d/spikeglx" --json >"$d/info.json"; check "info --json $probe exited $?" [ $? = 0 ]
  /usr/bin/python3 - "$d" <<'PY'; check "info --json of $probe disagrees with the simulation" [ $? = 0 ]
import json, sys
d = sys.argv[1]
info = json.load(open(f"{d}/info.json"))
probe = json.load(open(f"{d}/probe.json"))["probes"][0]
rec = json.load(open(f"{d}/recording.json"))
ok = True
def need(cond, what):
    global ok
    if not cond:
        print("mismatch:", what); ok = False
# SpikeGLX excludes the probe's reference channel (NP 1.0: channel 191) from sorting
cols = [c["column"] for c in info["channels"]]
expected = [c for c in range(rec["n_chan"]) if not (rec["probe"] == "np1" and c == 191)]
need(cols == expected, f"columns: {len(cols)} channels")
need(abs(info["fs_hz"] - 30000) < 1e-9, "fs")
need(info["n_samples"] == rec["n_samples"], "samples")
uv = {c["uv_per_bit"] for c in info["channels"]}
need(len(uv) == 1 and abs(next(iter(uv)) / rec["uv_per_bit"] - 1) < 1e-6, f"uv_per_bit {uv} vs {rec['uv_per_bit']}")
# positions agree up to one constant shift of origin, channel by channel (same order)
pos = {dev: xy for dev, xy in zip(probe["device_channel_indices"], probe["contact_positions"])}
sx = info["channels"][0]["x_um"] - pos[info["channels"][0]["column"]][0]
sy = info["channels"][0]["y_um"] - pos[info["channels"][0]["column"]][1]
for c in info["channels"]:
    p = pos[c["column"]]
    need(abs(c["x_um"] - p[0] - sx) < 1e-6 and abs(c["y_um"] - p[1] - sy) < 1e-6, f"position of column {c['column']}")
    if not ok: break
print(f"{d}: {len(info['channels'])} channels, {info['n_samples']} samples, {uv.pop()} uV/bit, positions agree")
sys.exit(0 if ok else 1)
PY
done
head -20 "$T/np1/info.txt"
finish
