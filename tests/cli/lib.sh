# tests/cli/lib.sh - what every tests/cli/test_*.sh shares. Each script starts with
#   . "$(dirname "$0")/lib.sh"
# and gets (ctest sets the environment: tests/CMakeLists.txt):
#   BS    the boundsort command ($BOUNDSORT, required)
#   SRC   the source root ($BS_SOURCE, or the folder two levels above this file)
#   T     its scratch folder ($BS_TMP, or /tmp/boundsort-test/NAME by hand), emptied
#   PY    the system python3 (numpy comes from scripts/deps.sh), or $BS_PYTHON
# and the assertions, each counted in pass / fail:
#   ok                          a check passed
#   bad MESSAGE...              a check failed: "FAIL: MESSAGE" on stderr
#   check DESCRIPTION CMD...    ok if CMD succeeds, else bad DESCRIPTION
#   expect CODE PHRASE [--] CMD...
#                               CMD exits CODE and, unless PHRASE is empty, its stderr matches
#                               PHRASE (a grep regular expression); stdout goes to $T/out.txt,
#                               stderr to $T/err.txt
#   expect_fixed CODE PHRASE [--] CMD...   the same with PHRASE a fixed string (grep -F)
#   expect_line CODE LINE [--] CMD...      the same, and the first stderr line that is not a
#                               "warning: " is exactly LINE
#   finish                      prints "N passed, N failed"; its status is 1 if a check
#                               failed (the script's last command, so its exit code)
#   py_venv NAME "PKGS"         sets VPY to the python of the venv NAME holding PKGS (pinned), made
#                               once in the cache (BS_PY_CACHE, default ~/.cache/boundsort) from PyPI;
#                               status 1 with the reason on stdout when it cannot be (offline)
#   si_python                   the same for SpikeInterface (pinned below), into SIPY
#   spikewrap_ephys             EPHYS: the real NP2.0 SpikeGLX examples of spikewrap==0.4.0 (below)
# A script exits 77 to be reported as skipped.
set -u
BS=${BOUNDSORT:?BOUNDSORT is not set (the path of the boundsort command)}
SRC=${BS_SOURCE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
T=${BS_TMP:-/tmp/boundsort-test/$(basename "$0" .sh)}
PY=${BS_PYTHON:-/usr/bin/python3}
rm -rf "$T"; mkdir -p "$T"
pass=0; fail=0

ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fail=$((fail + 1)); }
check() { # check DESCRIPTION CMD...
  local what=$1; shift
  if "$@"; then ok; else bad "$what"; fi
}

# _bs_expect MODE CODE PHRASE [--] CMD...: MODE re (grep), fixed (grep -F) or line (exact line)
_bs_expect() {
  local mode=$1 code=$2 phrase=$3; shift 3
  [ "${1:-}" = -- ] && shift
  "$@" >"$T/out.txt" 2>"$T/err.txt"; local rc=$?
  if [ "$rc" != "$code" ]; then bad "$* exited $rc, expected $code: $(cat "$T/err.txt")"; return; fi
  case $mode in
    re) if [ -n "$phrase" ] && ! grep -q -- "$phrase" "$T/err.txt"; then
          bad "$*: message lacks '$phrase': $(cat "$T/err.txt")"; return; fi ;;
    fixed) if [ -n "$phrase" ] && ! grep -qF -- "$phrase" "$T/err.txt"; then
          bad "$*: message lacks '$phrase': $(cat "$T/err.txt")"; return; fi ;;
    line) local got; got=$(grep -v -m1 "^warning: " "$T/err.txt")
          if [ "$got" != "$phrase" ]; then bad "$*: message '$got', expected '$phrase'"; return; fi ;;
  esac
  ok
}
expect() { _bs_expect re "$@"; }
expect_fixed() { _bs_expect fixed "$@"; }
expect_line() { _bs_expect line "$@"; }

finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" = 0 ]
}

BS_CACHE=${BS_PY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/boundsort}
py_venv() { # py_venv NAME "PKGS"
  local venv=$BS_CACHE/$1 pkgs=$2
  mkdir -p "$BS_CACHE"
  if [ ! -f "$venv/.installed" ] || [ "$(cat "$venv/.installed")" != "$pkgs" ]; then
    rm -rf "$venv"
    { /usr/bin/python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check $pkgs; } \
      >"$T/$1-pip.txt" 2>&1 || { tail -3 "$T/$1-pip.txt"; echo "cannot set up the venv $1 (offline?)"; rm -rf "$venv"; return 1; }
    echo "$pkgs" >"$venv/.installed"
  fi
  VPY=$venv/bin/python
}
# pandas, scikit-learn and numba: SpikeInterface's Phy reader, PCA metrics and refractory-violation counts
si_python() { py_venv si-venv "spikeinterface==0.105.3 scipy==1.15.3 pandas==2.2.3 scikit-learn==1.6.1 numba==0.61.2" && SIPY=$VPY; }

# spikewrap_ephys: sets EPHYS to the folder of the two real 0.5-s NP2.0 four-shank SpikeGLX recordings
# (run-001_g0_imec0/, run-002_g0_imec0/) that spikewrap==0.4.0 (BSD-3-Clause, on PyPI) ships as
# examples, fetched once into the cache with the SpikeInterface venv's pip; needs si_python first.
# Status 1 with the reason on stdout when they cannot be fetched (offline).
spikewrap_ephys() {
  local data=$BS_CACHE/spikewrap-0.4.0
  if [ ! -f "$data/.unpacked" ]; then
    rm -rf "$data" && mkdir -p "$data"
    "$(dirname "$SIPY")/pip" download -q --disable-pip-version-check --no-deps spikewrap==0.4.0 -d "$data" \
      >"$T/dl.txt" 2>&1 || { tail -3 "$T/dl.txt"; echo "cannot download spikewrap==0.4.0 (offline?)"; rm -rf "$data"; return 1; }
    "$SIPY" - "$data" <<'PYEOF' || { echo "cannot unpack the spikewrap wheel"; rm -rf "$data"; return 1; }
import glob, sys, zipfile
d = sys.argv[1]
with zipfile.ZipFile(glob.glob(d + "/spikewrap-0.4.0-*.whl")[0]) as z:
    for n in z.namelist():
        if "/example_tiny_data/spikeglx/" in n or n.endswith("licenses/LICENSE"):
            z.extract(n, d)
PYEOF
    touch "$data/.unpacked"
  fi
  EPHYS=$data/spikewrap/examples/example_tiny_data/spikeglx/rawdata/sub-001/ses-001/ephys
  [ -d "$EPHYS" ] || { echo "no example data in the spikewrap wheel"; return 1; }
}
