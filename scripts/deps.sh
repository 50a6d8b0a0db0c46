#!/usr/bin/env bash
# deps.sh - install what boundsort needs to build and test on Debian 12.
# Skips apt-get when everything is already there. Needs root (or sudo).
set -euo pipefail
# libhdf5-dev: NWB input/output (optional for the build, installed so CI tests it);
# python3-venv: the NWB test installs pynwb and nwbinspector into a venv.
pkgs=(build-essential cmake pkg-config libopenblas-dev libcjson-dev clang libclang-rt-14-dev libomp-dev
      python3 python3-numpy python3-scipy libhdf5-dev python3-venv
      chromium chromium-driver  # the report's browser tests (Selenium from PyPI in a venv)
      munge slurmctld slurmd slurm-client snakemake  # batch: single-node SLURM and Snakemake tests
      debootstrap buildah)  # test_wheel: a clean Debian root for the pip wheel, the container image
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "deps: run as root or install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
