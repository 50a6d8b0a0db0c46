#!/usr/bin/env bash
# build.sh [DIR] [cmake options...] - configure and build boundsort into DIR (default build/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build}
shift || true
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)" 2>&1 | grep -E 'warning|error' && { echo "build: warnings or errors above" >&2; exit 1; }
echo "built $dir/boundsort" >&2
