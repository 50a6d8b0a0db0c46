#!/usr/bin/env bash
# bench/gpu_device.sh - the CUDA backend's checks and benchmarks in one run on a machine with an NVIDIA GPU
# (bench/README.md, "GPU"). Not a test: CI has no GPU.
#
# Needs prebuilt binaries (a machine without a compiler or OpenBLAS can run them): bench/gpu_pack.sh on the
# build machine writes .dev/ (ignored by git): bin/{boundsort,test_gpu,test_peel,test_detect,bench_match_stress}, the
# shared libraries they need (libs.tar.xz), and, when it could download them, the Kilosort 4 and faiss-cpu
# wheels (whl/) for the Kilosort 4 GPU comparison on the GPU machine's own PyTorch.
#
#   bash bench/gpu_device.sh [SECONDS] [STEPS]     # recording length (120), steps (all: tests sim cpu gpu long k ks4)
#
# Steps, each bounded by a timeout so that the run ends (gpuold, cpuold, and with long gpuold300, cpu300, cpuold300:
# the same sorts with .dev/bin/boundsort_old, the previous code, when bench/gpu_pack.sh was given OLD=REV, and the
# 5-minute recording on the CPU; gpu300again: the GPU sort of it once more, after the old code's): the GPU unit
# tests (test_gpu, test_peel, test_detect, the CLI test tests/cli/test_gpu.sh); a drifting 384-channel Neuropixels 1.0 recording (boundsort simulate, rigid drift,
# 100 units); boundsort on the CPU (all cores) and with --device cuda on it, with accuracy against ground
# truth (boundsort compare) and the spikes in which the two differ; a 300-s recording sorted with --device cuda; K = 17,345 templates matched with
# --gpu-mem 8G (bench_match_stress); Kilosort 4 with device cuda on the same recording. Everything goes to
# $OUT (or /tmp/gpu-out): logs, run summaries, compare JSON, and summary.txt, printed last.
set -u
D=${BS_DEV:-.dev}
O=${OUT:-/tmp/gpu-out}
SEC=${1:-120}
DEADLINE=${BS_DEADLINE:-560} # seconds: the last step (Kilosort 4) gets what is left of it
STEPS=${2:-"tests sim cpu gpu long k ks4"}
PY=$(command -v python3)
W=/tmp/bs-gpu
mkdir -p "$O" "$W" "$D/lib"
S=$O/summary.txt
: >"$S"
say() { echo "$*" | tee -a "$S"; }
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
tar -xJf "$D/libs.tar.xz" -C "$D/lib" || { echo "no $D/libs.tar.xz: run bench/gpu_pack.sh first"; exit 1; }
export LD_LIBRARY_PATH=$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$PWD/$D/bin/boundsort
NP=$(nproc)
say "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader), $NP cores, $(free -g | awk '/Mem:/{print $2}') GiB RAM, load $(cut -d' ' -f1-3 /proc/loadavg)"

if has tests; then
  timeout 120 "$D/bin/test_gpu" >"$O/test_gpu.log" 2>&1; rc=$?
  say "test_gpu: rc $rc; $(grep -E 'relative error|peel:|passed' "$O/test_gpu.log" | tr '\n' ';')"
  timeout 120 "$D/bin/test_peel" >"$O/test_peel.log" 2>&1; say "test_peel: rc $? $(tail -1 "$O/test_peel.log")"
  timeout 120 "$D/bin/test_detect" >"$O/test_detect.log" 2>&1
  say "test_detect: rc $? $(grep -E 'GPU detection|passed' "$O/test_detect.log" | tr '\n' ';')"
  BOUNDSORT=$B BS_TMP=$W/cli BS_PYTHON=$PY timeout 180 bash tests/cli/test_gpu.sh >"$O/test_gpu_cli.log" 2>&1
  say "tests/cli/test_gpu.sh: rc $? $(grep -E 'worst|identical|passed' "$O/test_gpu_cli.log" | tr '\n' ';')"
fi

REC=$W/np1d
if has sim; then
  t0=$(date +%s.%N)
  timeout 200 "$B" simulate -o "$REC" --probe np1 --duration "$SEC" --units 100 --drift rigid --seed 3 --threads "$NP" -q \
    >"$O/sim.log" 2>&1
  say "simulate np1 ${SEC} s rigid drift 100 units: rc $? in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s"
fi
ARGS=("$REC/recording.bin" --probe "$REC/probe.json" --fs 30000 --no-qc -q --threads "$NP")

sort_one() { # label, extra args
  local label=$1; shift
  timeout 300 "${SORT_BIN:-$B}" sort "${ARGS[@]}" -o "$W/$label" "$@" >"$O/sort_$label.log" 2>&1; local rc=$?
  cp "$W/$label/run_summary.json" "$O/run_summary_$label.json" 2>/dev/null
  "$B" compare "$W/$label" "$REC" --json >"$O/compare_$label.json" 2>>"$O/sort_$label.log"
  $PY - "$O/run_summary_$label.json" "$O/compare_$label.json" "$SEC" "$label" "$rc" <<'PYEOF' | tee -a "$S"
import json, sys
rs, cp, sec, label, rc = sys.argv[1:6]
try:
    r = json.load(open(rs)); c = json.loads(open(cp).readline())
except Exception as e:
    print(f"{label}: rc {rc}, no summary ({e})"); sys.exit(0)
st = ", ".join(f"{s['name']} {s['wall_s']:.1f} (read {s.get('read_preprocess_s', 0):.1f}, "
               f"CPU {100 * s.get('cpu_utilisation', 0):.0f} %)" for s in r["stages"])
gp = max(s.get("gpu_peak_bytes", 0) for s in r["stages"])
print(f"{label}: rc {rc}; wall {r['total_wall_s']:.1f} s = {float(sec) / r['total_wall_s']:.1f}x real time; peak RSS "
      f"{r['peak_rss_bytes'] / 2**20:.0f} MiB; GPU tracked peak {gp / 2**20:.1f} MiB; stages: {st}; "
      f"{c['n_well_detected']} of {c['n_gt_units']} well detected, mean accuracy {c['mean_accuracy']:.3f}, "
      f"{c['n_false_positive']} false positive units")
PYEOF
}
has gpu && sort_one gpu --device cuda --gpu-mem 8G
has cpu && sort_one cpu
# the previous code's binary (bench/gpu_pack.sh OLD=REV), interleaved in the same run for a same-machine baseline
if [ -x "$D/bin/boundsort_old" ]; then
  has gpuold && SORT_BIN=$D/bin/boundsort_old sort_one gpu_old --device cuda --gpu-mem 8G
  has cpuold && SORT_BIN=$D/bin/boundsort_old sort_one cpu_old
fi
diff_spikes() { # two sorts of one recording (labels): the matched spikes in which they differ
  [ -f "$W/$1/templates.npy" ] && [ -f "$W/$2/templates.npy" ] || return 0
  $PY - "$W/$1" "$W/$2" "$1" "$2" <<'PYEOF' | tee -a "$S"
import sys
import numpy as np
a, b, la, lb = sys.argv[1:5]
def load(o, f):
    return np.load(f"{o}/.stages/match/{f}").ravel()
ta, tb = load(a, "spike_times.npy"), load(b, "spike_times.npy")
ka, kb = load(a, "spike_templates.npy"), load(b, "spike_templates.npy")
aa, ab = load(a, "amplitudes.npy"), load(b, "amplitudes.npy")
print(f"{la} vs {lb}: matched spikes {ta.size}, {tb.size}; same templates: {bool(np.array_equal(np.load(f'{a}/templates.npy'), np.load(f'{b}/templates.npy')))}")
sa = set(zip(ta.tolist(), ka.tolist())); sb = set(zip(tb.tolist(), kb.tolist()))
both = sa & sb
print(f"(time, template) pairs in both {len(both)}; {la} only {len(sa - both)}, {lb} only {len(sb - both)}")
if len(both):
    ia = {p: i for i, p in enumerate(zip(ta.tolist(), ka.tolist()))}
    ib = {p: i for i, p in enumerate(zip(tb.tolist(), kb.tolist()))}
    d = np.array([abs(float(aa[ia[p]]) - float(ab[ib[p]])) / max(abs(float(aa[ia[p]])), 1e-9) for p in both])
    print(f"amplitudes of common spikes: relative difference median {np.median(d):.1e}, max {d.max():.1e}")
PYEOF
}
has cpu && has gpu && diff_spikes cpu gpu

if has long; then # throughput on a 5-minute recording: GPU, and the CPU with the step cpu300
  timeout 120 "$B" simulate -o "$W/np1long" --probe np1 --duration 300 --units 100 --drift rigid --seed 4 \
    --threads "$NP" -q >"$O/sim_long.log" 2>&1
  REC=$W/np1long SEC=300
  ARGS=("$REC/recording.bin" --probe "$REC/probe.json" --fs 30000 --no-qc -q --threads "$NP")
  sort_one gpu300 --device cuda --gpu-mem 8G
  [ -x "$D/bin/boundsort_old" ] && has gpuold300 && SORT_BIN=$D/bin/boundsort_old sort_one gpu300_old --device cuda --gpu-mem 8G
  # once more after the old code's sort: what the order of the sorts does to the times
  has gpu300again && sort_one gpu300_again --device cuda --gpu-mem 8G
  has cpu300 && sort_one cpu300 && diff_spikes cpu300 gpu300
  [ -x "$D/bin/boundsort_old" ] && has cpuold300 && SORT_BIN=$D/bin/boundsort_old sort_one cpu300_old
fi

if has k; then
  timeout 200 "$D/bin/bench_match_stress" --budget 16G --gpu-mem 8G --batch-seconds 0.5 --batches 2 17345 \
    >"$O/match_stress.log" 2>&1
  say "bench_match_stress K=17345 --gpu-mem 8G: rc $? $(tr '\n' ';' <"$O/match_stress.log")"
fi

if has ks4 && ls "$D"/whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$D"/whl/*.whl \
    >"$O/pip.log" 2>&1 || say "pip install of the wheels failed: $(tail -2 "$O/pip.log")"
  PYTHONPATH=/tmp/site timeout $((DEADLINE - SECONDS > 30 ? DEADLINE - SECONDS : 30)) $PY bench/ks4_driver.py "$REC" "$W/ks4" --device cuda --threads "$NP" \
    >"$O/ks4.log" 2>&1; rc=$?
  cp "$W/ks4/ks4_driver.json" "$O/" 2>/dev/null
  "$B" compare "$W/ks4" "$REC" --json >"$O/compare_ks4.json" 2>>"$O/ks4.log"
  $PY - "$O/ks4_driver.json" "$O/compare_ks4.json" "$SEC" "$rc" <<'PYEOF' | tee -a "$S"
import json, sys
dj, cp, sec, rc = sys.argv[1:5]
try:
    d = json.load(open(dj)); c = json.loads(open(cp).readline())
except Exception as e:
    print(f"ks4 (cuda): rc {rc}, no result ({e})"); sys.exit(0)
w = d["import_s"] + d["run_kilosort_s"]
print(f"ks4 (cuda, {d.get('gpu_name')}; kilosort {d['kilosort_version']}, torch {d['torch_version']}): rc {rc}; "
      f"wall {w:.1f} s (run_kilosort {d['run_kilosort_s']:.1f}) = {float(sec) / w:.1f}x real time; peak RSS "
      f"{d['peak_rss_bytes'] / 2**20:.0f} MiB; GPU peak allocated {d['gpu_peak_allocated_bytes'] / 2**20:.0f} MiB "
      f"(reserved {d['gpu_peak_reserved_bytes'] / 2**20:.0f}); {c['n_well_detected']} of {c['n_gt_units']} well "
      f"detected, mean accuracy {c['mean_accuracy']:.3f}, {c['n_false_positive']} false positive units")
PYEOF
  tail -5 "$O/ks4.log"
fi
echo "==== summary"
cat "$S"
