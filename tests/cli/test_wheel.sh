#!/usr/bin/env bash
# test_wheel.sh - the pip package (pyproject.toml, scripts/build_wheel.sh), as a user gets it:
# * the repaired wheel is named for include/boundsort.h's version and carries the program, its
#   libraries (OpenBLAS, cJSON, libgomp ...), boundsort.pth and the SpikeInterface wrapper;
# * in a fresh venv here, `boundsort` on the venv's PATH and `python -m boundsort` run the program, and
#   its sort of a simulated recording is byte-identical to the build's;
# * in a clean Debian root made with debootstrap (only python3 and python3-venv: no OpenBLAS, cJSON or
#   HDF5), `pip install "boundsort-*.whl[spikeinterface]"` (its dependencies downloaded here beforehand,
#   installed there with --no-index) gives a `boundsort` that sorts, and SpikeInterface's
#   run_sorter("boundsort", ...) works with no `import boundsort_si` (boundsort.pth) and returns the
#   units of the Phy folder; read_phy gives each quality metric once (no `*_repeat` property), and
#   read_nwb_sorting reads the units.nwb of export-nwb with the same spike trains;
# * the container image (Containerfile, scripts/build_image.sh) built with buildah on that root runs
#   `boundsort` (a sort byte-identical to the build's) and SpikeInterface knows the sorter in it; it is
#   saved as the docker archive boundsort.def bootstraps from.
# Needs PyPI (skipped when it cannot be reached); the clean-root part needs root and debootstrap, the
# image part buildah (scripts/deps.sh installs both), and reads the Debian mirror from this machine's apt sources. Skipped
# under the sanitizers (the wheel is a release build of its own).
. "$(dirname "$0")/lib.sh"

[ -n "${BS_SANITIZED:-}" ] && { echo "sanitizer build: the release build tests the wheel"; exit 77; }
pip_ok=$(python3 -m pip download -q --no-deps -d "$T/probe" "scikit-build-core>=0.10" >/dev/null 2>&1 && echo 1)
[ -n "$pip_ok" ] || { echo "PyPI cannot be reached: skipped"; exit 77; }
v=$(sed -n 's/^#define BOUNDSORT_VERSION "\(.*\)"$/\1/p' "$SRC/include/boundsort.h")

bash "$SRC/scripts/build_wheel.sh" "$T/dist" >"$T/wheel.log" 2>&1 && ok || bad "build_wheel.sh failed: $(tail -15 "$T/wheel.log")"
whl=$(ls "$T"/dist/boundsort-"$v"-py3-none-manylinux_*_x86_64.whl 2>/dev/null | head -1)
[ -n "$whl" ] && ok || { bad "no boundsort-$v-py3-none-manylinux_*_x86_64.whl in $(ls "$T/dist")"; finish; exit; }
python3 -m zipfile -l "$whl" | awk 'NR > 1 {print $1}' >"$T/files.txt"
for f in boundsort/bin/boundsort boundsort.pth boundsort_si/sorter.py boundsort_si/params_table.json \
         'boundsort.libs/libopenblas' 'boundsort.libs/libcjson' 'boundsort.libs/libgomp'; do
  grep -q "^$f" "$T/files.txt" && ok || bad "the wheel has no $f"
done

# a fresh venv on this machine
python3 -m venv "$T/venv" && "$T/venv/bin/pip" install -q --no-deps "$whl" >"$T/pip.log" 2>&1 && ok \
  || bad "pip install of the wheel failed: $(tail -5 "$T/pip.log")"
[ "$("$T/venv/bin/boundsort" --version)" = "boundsort $v" ] && ok || bad "venv boundsort --version: $("$T/venv/bin/boundsort" --version 2>&1)"
[ "$("$T/venv/bin/python" -m boundsort --version)" = "boundsort $v" ] && ok || bad "python -m boundsort --version"
ldd "$T/venv/lib/"python3*/site-packages/boundsort/bin/boundsort | grep -q "boundsort.libs/libopenblas" && ok \
  || bad "the installed program does not load the wheel's OpenBLAS"
"$BS" simulate -o "$T/sim" --probe linear32 --duration 8 --units 6 --seed 5 -q >/dev/null || bad "simulate"
"$T/venv/bin/boundsort" sort "$T/sim" -o "$T/out_wheel" -q --no-qc 2>/dev/null && ok || bad "the wheel's boundsort cannot sort"
"$BS" sort "$T/sim" -o "$T/out_build" -q --no-qc 2>/dev/null || bad "the build's boundsort cannot sort"
for f in spike_times.npy spike_clusters.npy templates.npy amplitudes.npy; do
  cmp -s "$T/out_wheel/$f" "$T/out_build/$f" && ok || bad "$f differs between the wheel's program and the build's"
done

# a clean Debian root with only python3
if [ "$(id -u)" != 0 ] || ! command -v debootstrap >/dev/null; then
  echo "not root or no debootstrap: the clean-root part is skipped"; finish; exit
fi
R=$T/root ctr="" img=""
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
cleanup() {
  [ -z "$ctr" ] || buildah rm "$ctr" >/dev/null 2>&1
  [ -z "$img" ] || buildah rmi "$img" "localhost/boundsort-base:$codename" >/dev/null 2>&1
  mountpoint -q "$R/proc" && umount "$R/proc"
  mountpoint -q "$R/proc" || rm -rf "$R"
}
trap cleanup EXIT
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "'"$codename"'" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
debootstrap --variant=minbase --include=python3,python3-venv "$codename" "$R" $mirror >"$T/debootstrap.log" 2>&1 \
  && ok || { bad "debootstrap failed: $(tail -5 "$T/debootstrap.log")"; finish; exit; }
ls "$R"/usr/lib/*/libopenblas* "$R"/usr/lib/*/libcjson* "$R"/usr/lib/*/libhdf5* >/dev/null 2>&1 \
  && bad "the clean root has OpenBLAS, cJSON or HDF5" || ok
# the container image (Containerfile) on that root, built with buildah, run with `buildah run` (chroot
# isolation: no container runtime is needed; podman/docker run need one that can set rlimits)
if command -v buildah >/dev/null; then
  img=localhost/boundsort-test:$v
  bash "$SRC/scripts/build_image.sh" --wheel "$whl" --base-root "$R" --tag "$img" --save "$T/image.tar" \
    >"$T/image.log" 2>&1 && ok || bad "build_image.sh failed: $(tail -5 "$T/image.log")"
  tar -xOf "$T/image.tar" manifest.json 2>/dev/null | grep -q "$img" && ok || bad "image.tar is not a docker archive of $img"
  rm -f "$T/image.tar"
  ctr=$(buildah from "$img" 2>/dev/null) && ok || bad "buildah from $img"
  [ "$(buildah run --isolation chroot "$ctr" -- boundsort --version 2>/dev/null)" = "boundsort $v" ] && ok \
    || bad "boundsort --version in the image"
  buildah copy -q "$ctr" "$T/sim" /sim >/dev/null
  buildah run --isolation chroot "$ctr" -- sh -c 'boundsort sort /sim -o /out -q --no-qc --threads 2 &&
    python -c "import spikeinterface.sorters as s; assert \"boundsort\" in s.installed_sorters()"' \
    >"$T/image_sort.log" 2>&1 && ok || bad "sort or SpikeInterface in the image failed: $(tail -5 "$T/image_sort.log")"
  buildah run --isolation chroot "$ctr" -- cat /out/spike_times.npy >"$T/image_spike_times.npy" 2>/dev/null
  cmp -s "$T/image_spike_times.npy" "$T/out_build/spike_times.npy" && ok || bad "the image's sort differs from the build's"
else
  echo "no buildah: the image part is skipped"
fi

pyv=$(chroot "$R" python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
mkdir -p "$R/wheels"
python3 -m pip download -q -d "$R/wheels" --python-version "$pyv" --only-binary=:all: \
  "spikeinterface>=0.101" probeinterface numpy pandas h5py >"$T/download.log" 2>&1 && ok \
  || bad "downloading SpikeInterface for python $pyv failed: $(tail -5 "$T/download.log")"
cp "$whl" "$R/wheels/"
cp -r "$T/sim" "$R/sim"
cat >"$R/si_check.py" <<'PYEOF'
import sys
from spikeinterface.core import generate_ground_truth_recording
from spikeinterface.sorters import installed_sorters, run_sorter
import numpy as np
assert "boundsort" in installed_sorters(), installed_sorters()
rec, gt = generate_ground_truth_recording(durations=[10.0], num_channels=16, num_units=5, seed=2)
rec = rec.save(folder="/si_rec")
sorting = run_sorter("boundsort", rec, folder="/si_out", threads=2)
n = sum(len(sorting.get_unit_spike_train(u)) for u in sorting.unit_ids)
assert n == len(np.load("/si_out/sorter_output/phy/spike_times.npy")), n
# the Phy folder and the NWB units, read by SpikeInterface: each metric once, the same spike trains
import subprocess
import boundsort, boundsort_si
from spikeinterface.extractors import read_nwb_sorting, read_phy
phy = "/si_out/sorter_output/phy"
keys = read_phy(phy).get_property_keys()
assert "snr" in keys and not [k for k in keys if k.endswith("_repeat")], keys
subprocess.run([boundsort.binary(), "export-nwb", phy, "-o", "/units.nwb"], check=True)
nwb = read_nwb_sorting("/units.nwb")
trains = lambda s: sorted(tuple(s.get_unit_spike_train(u)) for u in s.unit_ids)
assert trains(nwb) == trains(sorting), "the NWB units are not the Phy folder's"
print(len(sorting.unit_ids), n, boundsort_si.__version__)
PYEOF
mount -t proc proc "$R/proc"
chroot "$R" /bin/sh -c "python3 -m venv /v && /v/bin/pip install -q --no-index --find-links /wheels \
  \"/wheels/$(basename "$whl")[spikeinterface]\" h5py" >"$T/chroot_pip.log" 2>&1 && ok \
  || bad "pip install in the clean root failed: $(tail -5 "$T/chroot_pip.log")"
[ "$(chroot "$R" /v/bin/boundsort --version)" = "boundsort $v" ] && ok || bad "boundsort --version in the clean root"
chroot "$R" /v/bin/boundsort sort /sim -o /out -q --no-qc --threads 2 >"$T/chroot_sort.log" 2>&1 && ok \
  || bad "sort in the clean root failed: $(tail -5 "$T/chroot_sort.log")"
cmp -s "$R/out/spike_times.npy" "$T/out_build/spike_times.npy" && ok || bad "the clean root's sort differs from the build's"
chroot "$R" /bin/sh -c "cd / && /v/bin/python /si_check.py" >"$T/si.log" 2>&1 && ok \
  || bad "run_sorter(\"boundsort\") in the clean root failed: $(tail -8 "$T/si.log")"
read -r nu ns sv < <(tail -1 "$T/si.log")
[ "${nu:-0}" -gt 0 ] && [ "${ns:-0}" -gt 0 ] && ok || bad "run_sorter gave ${nu:-?} units, ${ns:-?} spikes"
[ "${sv:-}" = "$v" ] && ok || bad "boundsort_si.__version__ is '${sv:-}', not $v"
echo "clean root ($codename, python $pyv): run_sorter gave $nu units, $ns spikes"
finish
