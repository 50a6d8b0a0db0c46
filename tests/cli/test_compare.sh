#!/usr/bin/env bash
# test_compare.sh - `boundsort compare` end to end: the JSON summary on a
# SpikeInterface fixture (numbers from tests/data/compare/mixed/expected.json),
# the table, a GT folder scored against itself, --exclude-group, --delta-ms,
# and the exit codes: 1 for bad usage, 2 for unreadable or malformed input.
set -u
BOUNDSORT=${BOUNDSORT:?BOUNDSORT is not set}
DATA=${BS_TEST_DATA:?BS_TEST_DATA is not set}/compare
TMP=${BS_TMP:-/tmp/boundsort-test/test_compare}
mkdir -p "$TMP"
fails=0
pass() { :; }
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
expect_rc() { # expected_rc description command...
    local want=$1 what=$2; shift 2
    "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    [ "$rc" -eq "$want" ] || fail "$what: exit $rc, expected $want ($(head -c 300 "$TMP/err"))"
}
has() { grep -q -- "$2" "$1" || fail "$1 lacks '$2': $(head -c 400 "$1")"; }

M=$DATA/mixed
# JSON summary: SpikeInterface gives 6 GT, 8 sorted, 1 well detected, 1 false
# positive, 2 redundant, 1 overmerged, 3 bad units for this case.
expect_rc 0 "json" "$BOUNDSORT" compare "$M/sorted" "$M/gt" --json
[ "$(wc -l <"$TMP/out")" -eq 1 ] || fail "json output is not one line"
for kv in '"n_gt_units":6' '"n_sorted_units":8' '"n_well_detected":1' '"n_false_positive":1' \
          '"n_redundant":2' '"n_overmerged":1' '"n_bad":3' '"delta_samples":12' \
          '"mean_accuracy":0.58677913785594' '"units":\[{"gt_unit":0,"n_gt":60,"sorted_unit":3,' \
          '"gt_unit":2,"n_gt":56,"sorted_unit":null'; do
    has "$TMP/out" "$kv"
done

# the table
expect_rc 0 "table" "$BOUNDSORT" compare "$M/sorted" "$M/gt"
has "$TMP/out" "well detected: *1$"
has "$TMP/out" "redundant units: *2$"
grep -Eq '^ +2 +56 +- +0 +0\.0000' "$TMP/out" || fail "unmatched GT unit 2 not shown with '-'"

# --well-detected lowers the bar: units with agreement >= 0.5 (the 5 matched ones here)
expect_rc 0 "well-detected" "$BOUNDSORT" compare "$M/sorted" "$M/gt" --json --well-detected 0.5
has "$TMP/out" '"n_well_detected":5'

# a GT folder against itself
expect_rc 0 "self" "$BOUNDSORT" compare "$M/gt" "$M/gt" --json
has "$TMP/out" '"mean_accuracy":1,'
has "$TMP/out" '"n_false_positive":0'
has "$TMP/out" '"n_well_detected":6'

# --exclude-group noise drops the pure-noise cluster (SpikeInterface: 7 units, 0 FP)
expect_rc 0 "exclude" "$BOUNDSORT" compare "$M/sorted" "$M/gt" --json --exclude-group noise
has "$TMP/out" '"n_sorted_units":7'
has "$TMP/out" '"n_false_positive":0'

# --delta-ms 0 : 0 samples, only exact coincidences
expect_rc 0 "delta" "$BOUNDSORT" compare "$M/sorted" "$M/gt" --json --delta-ms 0
has "$TMP/out" '"delta_samples":0'

# usage errors: exit 1
expect_rc 1 "no args" "$BOUNDSORT" compare
expect_rc 1 "one arg" "$BOUNDSORT" compare "$M/sorted"
expect_rc 1 "three args" "$BOUNDSORT" compare "$M/sorted" "$M/gt" extra
expect_rc 1 "bad option" "$BOUNDSORT" compare "$M/sorted" "$M/gt" --frobnicate
expect_rc 1 "bad delta" "$BOUNDSORT" compare "$M/sorted" "$M/gt" --delta-ms abc
has "$TMP/err" "delta-ms"
expect_rc 1 "bad well-detected" "$BOUNDSORT" compare "$M/sorted" "$M/gt" --well-detected 2
expect_rc 1 "missing value" "$BOUNDSORT" compare "$M/sorted" "$M/gt" --delta-ms
expect_rc 0 "help" "$BOUNDSORT" compare --help
has "$TMP/out" "usage: boundsort compare"

# bad input: exit 2 with a message naming the file
expect_rc 2 "missing GT" "$BOUNDSORT" compare "$M/sorted" "$TMP/nowhere"
has "$TMP/err" "recording.json"
expect_rc 2 "missing sorting" "$BOUNDSORT" compare "$TMP/nowhere" "$M/gt"
has "$TMP/err" "not a folder"
# GT folder without recording.json
mkdir -p "$TMP/nojson" && cp "$M/gt/"*.npy "$TMP/nojson/"
expect_rc 2 "no recording.json" "$BOUNDSORT" compare "$M/sorted" "$TMP/nojson"
# mismatched lengths: clusters of another case
mkdir -p "$TMP/mismatch" && cp "$M/sorted/spike_times.npy" "$TMP/mismatch/" \
    && cp "$DATA/random0/sorted/spike_clusters.npy" "$TMP/mismatch/"
expect_rc 2 "mismatched lengths" "$BOUNDSORT" compare "$TMP/mismatch" "$M/gt"
has "$TMP/err" "expected the same length"
# a truncated .npy
mkdir -p "$TMP/trunc" && cp "$M/sorted/spike_clusters.npy" "$TMP/trunc/" \
    && head -c 100 "$M/sorted/spike_times.npy" >"$TMP/trunc/spike_times.npy"
expect_rc 2 "truncated npy" "$BOUNDSORT" compare "$TMP/trunc" "$M/gt"
has "$TMP/err" "spike_times.npy"
# not an npy at all
mkdir -p "$TMP/garbage" && echo "hello" >"$TMP/garbage/spike_times.npy" \
    && cp "$M/sorted/spike_clusters.npy" "$TMP/garbage/"
expect_rc 2 "garbage npy" "$BOUNDSORT" compare "$TMP/garbage" "$M/gt"

if [ "$fails" -ne 0 ]; then
    echo "$fails failed"
    exit 1
fi
echo "all passed"
