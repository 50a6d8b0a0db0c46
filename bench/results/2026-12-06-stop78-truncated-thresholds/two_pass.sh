#!/bin/bash
# tp.sh TAG BIN case... : sort keeping stages, rule, re-sort with BS_THK, compare both
T=$1; B=$2; shift 2
for c in "$@"; do
  case $c in np1_2min) R=/tmp/np1_2min;; lin32) R=/tmp/lin32;; *) R=$(ls -d /work/main/bench/cases/$c-s* | head -1);; esac
  rm -rf /tmp/p1_$c /tmp/p2_$c
  $B sort $R -o /tmp/p1_$c ${PARAMS:+--params $PARAMS} --threads 2 --no-qc --no-report -q 2>/dev/null
  /tmp/bs_cur compare /tmp/p1_$c $R > /tmp/c_p1_$c.txt
  K=$(/work/main/bench/.venv-si/bin/python /tmp/thk_rule.py /tmp/p1_$c 2>/tmp/rule_$c.txt)
  echo "$c rule: $K"; cat /tmp/rule_$c.txt
  BS_THK="$K" $B sort $R -o /tmp/p2_$c ${PARAMS:+--params $PARAMS} --threads 2 --no-qc --no-report -q 2>/dev/null
  /tmp/bs_cur compare /tmp/p2_$c $R > /tmp/c_p2_$c.txt
  for x in p1 p2; do f=/tmp/c_${x}_$c.txt
  echo "$x $c $(grep -E '^well detected:' $f | awk '{print $3}') ($(grep 'SNR >= 5:' $f | head -1 | awk '{print $5,$6,$7}')) FP $(grep 'false positive' $f | awk '{print $4}') red $(grep 'redundant' $f | awk '{print $3}') acc $(grep 'mean accuracy' $f | awk '{print $3}')"; done
done
