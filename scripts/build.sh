#!/usr/bin/env bash
# build.sh [DIR] [cmake options...] - configure and build boundsort into DIR (default build/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build}
shift || true
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@" >/dev/null
# The build's own exit status decides failure; any warning fails it too (pipefail alone would hide a failed
# build behind grep's "no match").
log=$(cmake --build "$dir" -j "$(nproc)" 2>&1) || { printf '%s\n' "$log"; echo "build: failed" >&2; exit 1; }
if printf '%s\n' "$log" | grep -E 'warning|error'; then
  echo "build: warnings or errors above" >&2
  exit 1
fi
echo "built $dir/boundsort" >&2
