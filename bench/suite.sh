#!/usr/bin/env bash
# suite.sh [CASE ... | all] - the whole benchmark in one command on a fresh machine: sets up bench/.venv
# (bench/setup.sh) when it is missing, builds boundsort (scripts/build.sh) when there is no binary, then
# runs boundsort and Kilosort 4 on every case (default: all) with --reuse, so a run that was interrupted
# goes on where it stopped instead of sorting again. The table is printed and written to bench/results/.
# Extra run.py options go in BENCH_ARGS, e.g. BENCH_ARGS="--only boundsort" bash bench/suite.sh.
# Time: the 384-channel cases take hours per Kilosort 4 run on a 2-core CPU; see README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
[ -x "$here/.venv/bin/python" ] || bash "$here/setup.sh"
if [ -z "${BOUNDSORT:-}" ] && [ ! -x "$root/build/boundsort" ]; then
  bash "$root/scripts/build.sh"
fi
[ $# -gt 0 ] || set -- all
# shellcheck disable=SC2086
exec bash "$here/run.sh" --reuse ${BENCH_ARGS:-} "$@"
