#!/bin/bash
# test_validate.sh - `boundsort validate` on the numpy-written fixture
# tests/data/phy/small (made by tests/data/phy/make_fixture.py): exit 0 and the
# OK line when clean; exit 2 and the expected violation line for copies broken
# one rule at a time; exit 2 for a missing folder; exit 1 for bad usage.
. "$(dirname "$0")/lib.sh"
SMALL=${BS_TEST_DATA:?}/phy/small

fresh() { rm -rf "$T/$1"; cp -r "$SMALL" "$T/$1"; echo "$T/$1"; }
# poke OFFSET BYTE FILE: overwrite one byte (given as 3-digit octal)
poke() { printf "\\$2" | dd of="$3" bs=1 seek="$1" conv=notrunc status=none; }

# validates CODE PHRASE DIR: `boundsort validate DIR` exits CODE and its output (stdout and stderr) holds PHRASE
validates() {
    local code=$1 phrase=$2 dir=$3 out rc
    out=$("$BS" validate "$dir" 2>&1)
    rc=$?
    if [ "$rc" != "$code" ] || ! grep -qF -- "$phrase" <<<"$out"; then
        bad "validate $dir: exit $rc (expected $code), output:
$out
  (expected to contain: $phrase)"
    else
        ok
    fi
}

# count_violations N DIR: exactly N violation lines (lines that are neither notes nor the summary)
count_violations() {
    local n
    n=$("$BS" validate "$2" 2>/dev/null | grep -vc '^note: ')
    if [ "$n" != "$1" ]; then
        bad "$2: $n violation lines, expected $1"
    else
        ok
    fi
}

d=$(fresh clean)
validates 0 "OK: 10 spikes, 3 clusters, 3 templates" "$d"

d=$(fresh unsorted)
poke 128 226 "$d/spike_times.npy"     # spike 0: 3 -> 150
validates 2 "spike_times.npy: not sorted: spike 1 at sample 10 comes after sample 150" "$d"
validates 2 "1 violation in" "$d"
count_violations 1 "$d"

d=$(fresh tpl_id)
poke 152 011 "$d/spike_templates.npy" # spike 6: template 2 -> 9
validates 2 "spike_templates.npy: 1 spikes have template ids outside 0..2: first spike 6 has id 9, expected ids < 3" "$d"
count_violations 1 "$d"

d=$(fresh f64)
poke 22 146 "$d/spike_times.npy"      # '<i8' -> '<f8'
validates 2 "spike_times.npy: dtype <f8, expected an integer dtype" "$d"
count_violations 1 "$d"

d=$(fresh no_rate)
grep -v sample_rate "$SMALL/params.py" > "$d/params.py"
validates 2 "params.py: missing key 'sample_rate'" "$d"
count_violations 1 "$d"

d=$(fresh no_times)
rm "$d/spike_times.npy"
validates 2 "spike_times.npy: missing" "$d"
count_violations 1 "$d"

d=$(fresh truncated)
truncate -s -4 "$d/pc_features.npy"
validates 2 "truncated npy file: 160 data bytes expected, 156 present" "$d"
count_violations 1 "$d"

d=$(fresh beyond)
truncate -s 1980 "$d/rec.bin"         # 198 samples: spikes at 198 and 199 are past the end
validates 2 "spike_times.npy: 2 spikes after the end of the recording: first spike 8 at sample 198" "$d"
count_violations 1 "$d"

d=$(fresh no_header)
sed -i 1d "$d/cluster_KSLabel.tsv"
validates 2 "cluster_KSLabel.tsv: no header" "$d"
count_violations 1 "$d"

d=$(fresh short_clusters)
truncate -s -4 "$d/spike_clusters.npy" # now truncated: 40 bytes declared, 36 present
validates 2 "spike_clusters.npy: unreadable" "$d"

d=$(fresh missing_row)
sed -i '/^5/d' "$d/cluster_group.tsv"
validates 2 "cluster_group.tsv: 1 cluster ids of the spikes have no row" "$d"

d=$(fresh tpl_shape)
cp "$SMALL/channel_map.npy" "$d/channel_map.npy"
poke 61 063 "$d/channel_map.npy"      # shape (4,) -> (3,) in the header text
truncate -s -4 "$d/channel_map.npy"
validates 2 "templates.npy: shape (3, 5, 4), expected (3, 5, 3)" "$d"

d=$(fresh raw_absent)
rm "$d/rec.bin"
validates 0 "note: spike times cannot be checked against the recording length: raw file" "$d"
validates 0 "OK: 10 spikes" "$d"

# NaN / Inf in templates.npy or amplitudes.npy: named with the first offending index
d=$(fresh tpl_nan)
$PY -c "import numpy as np; t = np.load('$d/templates.npy'); t[2, 1, 3] = np.nan; t[2, 4, 0] = np.inf; np.save('$d/templates.npy', t)"
validates 2 "templates.npy: 2 non-finite values: the first is nan at [2, 1, 3] (template, sample, channel)" "$d"
count_violations 1 "$d"

d=$(fresh amp_inf)
$PY -c "import numpy as np; a = np.load('$d/amplitudes.npy'); a[7] = -np.inf; np.save('$d/amplitudes.npy', a)"
validates 2 "amplitudes.npy: 1 non-finite values: the first is -inf at [7] (spike)" "$d"
count_violations 1 "$d"

# unreadable folder, usage
validates 2 "cannot open the Phy folder" "$T/does-not-exist"
validates 2 "not a folder" "$SMALL/params.py"
out=$("$BS" validate 2>&1); rc=$?
[ $rc = 1 ] && grep -q "usage: boundsort validate OUT" <<<"$out" && ok || bad "no argument: exit $rc"
"$BS" validate "$SMALL" "$SMALL" >/dev/null 2>&1; rc=$?
[ $rc = 1 ] && ok || bad "two folders: exit $rc"
"$BS" validate --frobnicate "$SMALL" >/dev/null 2>&1; rc=$?
[ $rc = 1 ] && ok || bad "unknown option: exit $rc"
"$BS" validate --help | grep -q "usage: boundsort validate OUT" && ok || bad "--help"

finish
