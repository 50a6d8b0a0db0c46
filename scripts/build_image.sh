#!/usr/bin/env bash
# build_image.sh [--tag T] [--base IMAGE | --base-root DIR] [--wheel FILE] [--python-version X.Y]
#                [--save FILE] [--context-only DIR]
# The container image of Containerfile, built with buildah (chroot isolation: no container runtime, no
# image registry needed). Steps:
#  1. the context: wheels/ with the boundsort wheel (--wheel, else scripts/build_wheel.sh) and its
#     [spikeinterface] dependencies for python X.Y (default 3.11, Debian 12's), downloaded here with pip;
#     --context-only DIR stops here (then `docker build -f Containerfile DIR` elsewhere);
#  2. the base: --base IMAGE as it is; --base-root DIR makes one of a root folder; neither: a Debian root with
#     python3 made by debootstrap (needs root; mirror from this machine's apt sources), imported as
#     localhost/boundsort-base:CODENAME;
#  3. buildah bud --isolation chroot -t T (default localhost/boundsort:VERSION), and with --save FILE the
#     image as a docker archive (what boundsort.def bootstraps from).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n 's/^#define BOUNDSORT_VERSION "\(.*\)"$/\1/p' "$root/include/boundsort.h")
tag=localhost/boundsort:$version base="" base_root="" wheel="" pyver=3.11 save="" context_only=""
die() { echo "build_image: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case $1 in
    --tag) tag=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    --base-root) base_root=$2; shift 2 ;;
    --wheel) wheel=$2; shift 2 ;;
    --python-version) pyver=$2; shift 2 ;;
    --save) save=$2; shift 2 ;;
    --context-only) context_only=$2; shift 2 ;;
    *) die "unknown option $1" ;;
  esac
done
work=$(mktemp -d "${TMPDIR:-/tmp}/boundsort-image.XXXXXX")
cleanup() { mountpoint -q "$work/root/proc" 2>/dev/null && umount "$work/root/proc"; rm -rf "$work"; }
trap cleanup EXIT
ctx=${context_only:-$work/context}
mkdir -p "$ctx/wheels"
if [ -n "$wheel" ]; then cp "$wheel" "$ctx/wheels/"; else bash "$root/scripts/build_wheel.sh" "$ctx/wheels" >/dev/null; fi
whl=$(ls "$ctx"/wheels/boundsort-*.whl | head -1)
python3 -m pip download -q -d "$ctx/wheels" --python-version "$pyver" --only-binary=:all: \
  "$whl[spikeinterface]" || die "pip download of the dependencies failed"
[ -z "$context_only" ] || { echo "$ctx"; exit 0; }

command -v buildah >/dev/null || die "buildah is not installed (apt-get install buildah)"
if [ -z "$base" ]; then
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  if [ -z "$base_root" ]; then
    command -v debootstrap >/dev/null || die "no --base and no debootstrap (apt-get install debootstrap)"
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    base_root=$work/root
    debootstrap --variant=minbase --include=python3,python3-venv "$codename" "$base_root" $mirror \
      >"$work/debootstrap.log" 2>&1 || { tail -5 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
  fi
  base=localhost/boundsort-base:$codename
  ctr=$(buildah from scratch) && buildah copy -q "$ctr" "$base_root" / >/dev/null \
    && buildah commit -q "$ctr" "$base" >/dev/null && buildah rm "$ctr" >/dev/null \
    || die "making the base image $base from $base_root failed"
fi
# buildah re-executes itself from a sealed memfd copy of its binary; on some kernels the seal can fail for a
# moment with EBUSY ("sealing memfd copy: Device or resource busy") while the copy's pages are still pinned.
# That failure, and only that one, is retried.
for try in 1 2 3; do
  buildah bud -q --isolation chroot --build-arg "BASE=$base" -f "$root/Containerfile" -t "$tag" "$ctx" \
    >/dev/null 2>"$work/bud.err" && break
  cat "$work/bud.err" >&2
  grep -q "sealing memfd" "$work/bud.err" && [ "$try" -lt 3 ] || die "buildah bud failed"
  echo "build_image: buildah's re-exec hit a transient EBUSY; retrying ($try/3)" >&2; sleep 3
done
if [ -n "$save" ]; then
  rm -f "$save"; buildah push -q "$tag" "docker-archive:$save:$tag" >/dev/null || die "buildah push to $save failed"
fi
echo "$tag"
