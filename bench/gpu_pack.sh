#!/usr/bin/env bash
# bench/gpu_pack.sh - build what bench/gpu_device.sh runs on a GPU machine that has no compiler, OpenBLAS or
# network: .dev/bin (boundsort with the CUDA backend and without HDF5, test_gpu, test_peel, test_detect,
# bench_match_stress), .dev/libs.tar.xz (the shared libraries they load besides glibc and the CUDA driver)
# with OLD=REV also .dev/bin/boundsort_old (revision REV built the same way), and, if PyPI is reachable,
# .dev/whl (Kilosort 4 and faiss-cpu wheels for the GPU machine's Python 3.12).
# .dev is ignored by git (.gitignore); a device tool carries it to the GPU machine with the repository.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/build.sh build-dev -DBOUNDSORT_CUDA=ON -DCMAKE_DISABLE_FIND_PACKAGE_HDF5=ON
cmake --build build-dev --target bench_match_stress -j "$(nproc)" >/dev/null
rm -rf .dev && mkdir -p .dev/bin .dev/whl
cp build-dev/boundsort build-dev/tests/test_gpu build-dev/tests/test_peel build-dev/tests/test_detect \
  build-dev/bench_match_stress .dev/bin/
libs=$(for b in .dev/bin/*; do ldd "$b"; done | awk '/=> \//{print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so')
# the libraries under their soname (the links resolved to files)
tmp=$(mktemp -d); for l in $libs; do cp -L "$l" "$tmp/"; done; tar -cJf .dev/libs.tar.xz -C "$tmp" .; rm -rf "$tmp"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .dev/whl kilosort==4.1.7 faiss-cpu==1.15.1 ||
  echo "gpu_pack: no wheels (PyPI unreachable): the Kilosort 4 step will be skipped" >&2
if [ -n "${OLD:-}" ]; then # the previous code's boundsort too, for a baseline on the same GPU machine
  old=$(mktemp -d)
  git worktree add -f "$old" "$OLD" >/dev/null
  (cd "$old" && bash scripts/build.sh build-dev -DBOUNDSORT_CUDA=ON -DCMAKE_DISABLE_FIND_PACKAGE_HDF5=ON >/dev/null)
  cp "$old/build-dev/boundsort" .dev/bin/boundsort_old
  git worktree remove --force "$old"
fi
du -sh .dev/* >&2
