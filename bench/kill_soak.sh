#!/usr/bin/env bash
# kill_soak.sh - kill -9 soak: a sort killed at random moments and resumed, and qc and report killed on
# the finished folder and rerun, each compared byte for byte with an uninterrupted run; counts the
# identical outputs and every temporary ("*.tmp-*", src/common/tmpfiles.h) left under the output folder.
#
#   bash bench/kill_soak.sh [-n SORT_KILLS] [--qc Q] [--report R] [--seed S] [--dir WORK] [--duration S]
#
# Defaults: 16 sort kills, 4 qc kills, 4 report kills, seed 1, WORK=$TMPDIR/boundsort-kill-soak (emptied), a 20-s
# linear32 recording with 8 units (`boundsort simulate --seed 2`). BOUNDSORT=/path picks the binary
# (default build/boundsort). Each sort kill: a fresh OUT, `sort` started, SIGKILL after a delay drawn
# uniformly in 2-95 % of the reference run's wall time (qc included), then `sort --resume`. Each qc or
# report kill: on a copy of the finished folder, SIGKILL after a delay within that command's reference
# time, then the command rerun. "Identical": every *.npy, *.tsv, params.py, params.json and curation.json
# (and report.html for report) equals the reference. Leftovers are counted twice: right after the kill
# (what the kill left) and after the recovery (what the sweep at start missed: must be 0).
# Last line: the summary; exit status 0 when every output is identical and nothing is left.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
BS=${BOUNDSORT:-$root/build/boundsort}
n_sort=16; n_qc=4; n_report=4; seed=1; work=${TMPDIR:-/tmp}/boundsort-kill-soak; duration=20
while [ $# -gt 0 ]; do
  case $1 in
    -n) n_sort=$2; shift 2 ;;
    --qc) n_qc=$2; shift 2 ;;
    --report) n_report=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --dir) work=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    *) echo "usage: bash bench/kill_soak.sh [-n N] [--qc Q] [--report R] [--seed S] [--dir WORK] [--duration S]" >&2
       exit 1 ;;
  esac
done
[ -x "$BS" ] || { echo "kill_soak: no boundsort at $BS (bash scripts/build.sh, or BOUNDSORT=...)" >&2; exit 1; }
RANDOM=$seed
rm -rf "$work"; mkdir -p "$work"
"$BS" simulate -o "$work/sim" --probe linear32 --duration "$duration" --units 8 --seed 2 -q >/dev/null ||
  { echo "kill_soak: simulate failed" >&2; exit 1; }
REC=("$work/sim/recording.bin" --probe "$work/sim/probe.json" --fs 30000 -q)

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
# delay LO_PCT HI_PCT SECONDS: a random delay in [LO %, HI %] of SECONDS
delay() { awk -v r=$RANDOM -v lo="$1" -v hi="$2" -v t="$3" 'BEGIN { printf "%.3f", t * (lo + (hi - lo) * r / 32767) / 100 }'; }
tmps() { find "$1" -name '*.tmp-*' 2>/dev/null | wc -l; }
# same REF DIR [EXTRA...]: DIR's outputs equal REF's
same() {
  local ref=$1 dir=$2 f; shift 2
  for f in "$ref"/*.npy "$ref"/*.tsv "$ref"/params.py "$ref"/params.json "$ref"/curation.json "$@"; do
    cmp -s "$f" "$dir/$(basename "$f")" || return 1
  done
}
# killrun DELAY CMD...: run CMD, SIGKILL it after DELAY s; sets rc (137: killed, else it finished first)
killrun() {
  local d=$1; shift
  "$@" 2>/dev/null & local pid=$!
  sleep "$d"; kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rc=$?
}

t0=$(now); "$BS" sort "${REC[@]}" -o "$work/ref" 2>/dev/null || { echo "kill_soak: reference sort failed" >&2; exit 1; }
t_sort=$(elapsed "$t0")
t0=$(now); "$BS" report "$work/ref" -q || { echo "kill_soak: reference report failed" >&2; exit 1; }
t_report=$(elapsed "$t0")
cp -r "$work/ref" "$work/qcref"
t0=$(now); "$BS" qc "$work/qcref" -q || { echo "kill_soak: reference qc failed" >&2; exit 1; }
t_qc=$(elapsed "$t0")
echo "reference: sort ${t_sort} s (with qc), qc ${t_qc} s, report ${t_report} s; $(uptime)"

kills=0; finished=0; identical=0; left_kill=0; left_after=0; failed=0
record() { # record WHAT DELAY IDENTICAL(0/1) LEFT_BY_KILL LEFT_AFTER
  [ "$rc" = 137 ] && kills=$((kills + 1)) || finished=$((finished + 1))
  [ "$3" = 1 ] && identical=$((identical + 1))
  left_kill=$((left_kill + $4)); left_after=$((left_after + $5))
  printf '%-7s delay %6s s  %-9s  identical %s  tmp left by the kill %2d, after recovery %d\n' \
    "$1" "$2" "$([ "$rc" = 137 ] && echo killed || echo "exit $rc")" "$([ "$3" = 1 ] && echo yes || echo NO)" "$4" "$5"
}

for i in $(seq "$n_sort"); do
  out=$work/sort_$i; d=$(delay 2 95 "$t_sort")
  killrun "$d" "$BS" sort "${REC[@]}" -o "$out"
  lk=$(tmps "$out")
  "$BS" sort "${REC[@]}" -o "$out" --resume 2>"$out.log" || { failed=$((failed + 1)); echo "resume failed: $(tail -2 "$out.log")"; }
  same "$work/ref" "$out" && s=1 || s=0
  record sort "$d" $s "$lk" "$(tmps "$out")"
done
for i in $(seq "$n_qc"); do
  out=$work/qc_$i; cp -r "$work/ref" "$out"; d=$(delay 2 95 "$t_qc")
  killrun "$d" "$BS" qc "$out" -q
  lk=$(tmps "$out")
  "$BS" qc "$out" -q 2>"$out.log" || { failed=$((failed + 1)); echo "qc rerun failed: $(tail -2 "$out.log")"; }
  same "$work/qcref" "$out" && s=1 || s=0
  record qc "$d" $s "$lk" "$(tmps "$out")"
done
# the page names its folder: every report run (the reference's too) in the same one, $work/rep
rep() { rm -rf "$work/rep"; cp -r "$work/ref" "$work/rep"; rm -f "$work/rep/report.html"; }
rep; "$BS" report "$work/rep" -q && cp "$work/rep/report.html" "$work/report.html" ||
  { echo "kill_soak: reference report failed" >&2; exit 1; }
for i in $(seq "$n_report"); do
  out=$work/rep; rep; d=$(delay 2 95 "$t_report")
  killrun "$d" "$BS" report "$out" -q
  lk=$(tmps "$out")
  "$BS" report "$out" -q 2>"$out.log" || { failed=$((failed + 1)); echo "report rerun failed: $(tail -2 "$out.log")"; }
  same "$work/ref" "$out" "$work/report.html" && s=1 || s=0
  record report "$d" $s "$lk" "$(tmps "$out")"
done

total=$((n_sort + n_qc + n_report))
echo "kill_soak: $total runs ($n_sort sort, $n_qc qc, $n_report report), $kills killed mid-run ($finished finished first):" \
     "$identical/$total outputs identical to the uninterrupted run, $left_after temporaries left under OUT after" \
     "recovery ($left_kill left by the kills, removed at restart), $failed recoveries failed; load: $(uptime | sed 's/.*load average: //')"
[ "$identical" = "$total" ] && [ "$left_after" = 0 ] && [ "$failed" = 0 ]
