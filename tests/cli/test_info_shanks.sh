#!/usr/bin/env bash
# test_info_shanks.sh - `boundsort info` counts the shanks in use (bs_probe_shanks_in_use), not the
# largest shank index + 1. A real four-shank NP 2.0 SpikeGLX .meta (tests/data/spikeglx/meta,
# probeinterface's test data) reads as 4 shanks, ids 0-3; the same .meta with the ~snsShankMap
# (or ~snsGeomMap) entries of shanks 0 and 3 marked unused keeps its shank indices 1 and 2
# (SpikeGLX numbers shanks physically) and reads as 2 shanks, ids 1-2 (it was reported as 3).
# Text and --json.
. "$(dirname "$0")/lib.sh"
DATA=${BS_TEST_DATA:?BS_TEST_DATA not set}
META=$DATA/spikeglx/meta/NP2_4_shanks_save_different_electrodes.imec0.ap.meta
[ -f "$META" ] || { bad "missing fixture $META"; finish; exit 1; }

# all4: the .meta as recorded; mid2: only shanks 1 and 2 in use. 100 samples of zeros each.
$PY - "$META" "$T" <<'PY'
import re, sys
meta, T = sys.argv[1], sys.argv[2]
text = open(meta, "rb").read().decode("latin-1")
n = int(re.search(r"nSavedChans=(\d+)", text).group(1))
def unuse(m):
    s, x, z, u = m.group(1).split(":")
    return "(%s:%s:%s:%s)" % (s, x, z, "0" if s in ("0", "3") else u)
def mid2(line):
    if not line.startswith(("~snsGeomMap=", "~snsShankMap=")):
        return line
    head, rest = line.split(")", 1)
    return head + ")" + re.sub(r"\(([^()]*)\)", unuse, rest)
for name, body in (("all4", text), ("mid2", "\n".join(mid2(l) for l in text.split("\n")))):
    open(f"{T}/{name}.ap.meta", "wb").write(body.encode("latin-1"))
    open(f"{T}/{name}.ap.bin", "wb").write(b"\0" * (n * 2 * 100))
PY

for c in "all4 4 0-3 0,1,2,3" "mid2 2 1-2 1,2"; do
    set -- $c
    "$BS" info "$T/$1.ap.bin" >"$T/$1.txt" 2>"$T/$1.err" && ok || bad "info $1: $(cat "$T/$1.err")"
    check "$1: shanks line" grep -q "^shanks         $2$" "$T/$1.txt"
    check "$1: shank ids line" grep -q "^shank ids      $3$" "$T/$1.txt"
    "$BS" info "$T/$1.ap.bin" --json >"$T/$1.json" 2>"$T/$1.err" && ok || bad "info $1 --json: $(cat "$T/$1.err")"
    check "$1: JSON n_shanks and shank_ids" $PY -c "
import json, sys
p = json.load(open(sys.argv[1]))['probe']
ids = [int(i) for i in sys.argv[3].split(',')]
assert p['n_shanks'] == int(sys.argv[2]) and p['shank_ids'] == ids, p
chans = json.load(open(sys.argv[1]))['channels']
assert sorted({c['shank'] for c in chans}) == ids
" "$T/$1.json" "$2" "$4"
done
finish
