#!/usr/bin/env bash
# setup.sh - one command that creates bench/.venv with SpikeInterface and Kilosort 4 on a CPU PyTorch.
#
# The lean route (see bench/README.md): PyPI's torch wheels for Linux x86_64 pull ~3 GB of nvidia-*
# CUDA packages and PyPI has no CPU-only torch, so PyTorch comes from Debian (python3-torch, a CPU
# build), together with Debian's numpy/scipy/scikit-learn/numba/faiss/matplotlib/pandas. The venv is
# created from /usr/bin/python3 with --system-site-packages; pip adds SpikeInterface (the last release
# that supports numpy 1.x, since Debian's torch is built against numpy 1.24) and Kilosort 4 with
# --no-deps (its metadata asks for torch>=2.1, but the code runs on torch 1.13: bench/README.md).
# Needs root (or sudo) for apt-get when the Debian packages are missing. Safe to re-run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
SI_VERSION=${SI_VERSION:-0.102.2}
KS_VERSION=${KS_VERSION:-4.1.7}
venv=$here/.venv

pkgs=(python3 python3-venv python3-pip python3-numpy python3-scipy python3-torch python3-sklearn python3-numba
      python3-faiss python3-matplotlib python3-tqdm python3-psutil python3-pandas time)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: apt-get install ${missing[*]}" >&2
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: run as root or install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
py=$venv/bin/python
# Keep Debian's compiled packages: pip must not replace numpy/scipy/torch/numba in the venv.
cons=$(mktemp); trap 'rm -f "$cons"' EXIT
/usr/bin/python3 - >"$cons" <<'PY'
import importlib.metadata as md
for n in ("numpy", "scipy", "torch", "numba", "scikit-learn", "pandas", "matplotlib"):
    try: print(f"{n}=={md.version(n)}")
    except md.PackageNotFoundError: pass
PY
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$py" -m pip install -q -c "$cons" "spikeinterface==$SI_VERSION"
"$py" -m pip install -q --no-deps "kilosort==$KS_VERSION"
"$py" -m pip install -q -c "$cons" pytest  # for python/tests
# The SpikeInterface wrapper of this repository (pure Python), from the source tree: the root pyproject.toml
# builds the C program too (pip install .), which the bench takes from build/ instead.
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$root/python" >"$site/boundsort_src.pth"

"$py" - <<'PY'
import importlib.metadata as md
import torch, numpy, spikeinterface, kilosort
from kilosort import run_kilosort  # noqa: F401
import boundsort_si  # noqa: F401
print("setup: ok: python", __import__("sys").version.split()[0], "numpy", numpy.__version__,
      "torch", torch.__version__, "(cuda available: %s)" % torch.cuda.is_available(),
      "spikeinterface", spikeinterface.__version__, "kilosort", md.version("kilosort"))
PY
