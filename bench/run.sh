#!/usr/bin/env bash
# run.sh [--reuse] [CASE ...] - boundsort vs Kilosort 4 on the ground-truth cases (default: smoke
# si-32ch-60s-20u). Needs bench/.venv (bash bench/setup.sh) and a built boundsort (bash scripts/build.sh,
# or BOUNDSORT=/path/to/boundsort). See bench/README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$here/.venv/bin/python" ] || { echo "run.sh: no bench/.venv; run: bash bench/setup.sh" >&2; exit 1; }
exec "$here/.venv/bin/python" "$here/run.py" "$@"
