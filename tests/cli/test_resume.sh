#!/usr/bin/env bash
# test_resume.sh - checkpoints and `sort --resume`: a sort killed with
# SIGKILL at several points (in the middle of the preprocessing, after whitening, after drift, in the
# middle of detection,
# after clustering, in the middle of matching, in the middle of the export)
# and resumed gives byte-identical final outputs to an uninterrupted run; the
# resumed run skips the stages that were complete; a completed run resumed
# changes nothing; changed parameters invalidate the checkpoints.
. "$(dirname "$0")/lib.sh"

duration=16
[ -n "${BS_SANITIZED:-}" ] && duration=12
"$BS" simulate -o "$T/sim" --probe linear32 --duration $duration --units 8 --seed 11 -q || { echo "simulate failed"; exit 1; }
REC=("$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000 --no-qc)  # qc is not a checkpointed stage
"$BS" sort "${REC[@]}" -o "$T/ref" -q && ok || bad "reference sort failed"

same_as_ref() { # same_as_ref DIR LABEL
  local f n
  for f in "$T"/ref/*.npy "$T"/ref/*.tsv "$T"/ref/params.py; do
    n=$(basename "$f")
    cmp -s "$f" "$1/$n" || { bad "$2: $n differs from the uninterrupted run"; return; }
  done
  ok
}

# kill point -> stages the resumed run must report as skipped (under the
# sanitizers, ~20x slower, one of the seven points: mid-export, whose resume
# loads every other stage's checkpoint)
cases=("preprocess:3|channels" "whitening:end|channels preprocess whitening"
       "drift:end|channels preprocess whitening drift" "detect:3|channels preprocess whitening drift basis"
       "cluster:end|channels preprocess whitening drift basis detect cluster"
       "match:4|channels preprocess whitening drift basis detect cluster"
       "finish:1|channels preprocess whitening drift basis detect cluster match")
[ -n "${BS_SANITIZED:-}" ] && cases=("${cases[6]}")
for case in "${cases[@]}"; do
  kill=${case%%|*}; skipped=${case#*|}
  out="$T/k_${kill%%:*}"
  BOUNDSORT_TEST_KILL=$kill "$BS" sort "${REC[@]}" -o "$out" -q 2>/dev/null; rc=$?
  [ "$rc" = 137 ] && ok || bad "kill at $kill: exit $rc, expected 137 (SIGKILL)"
  [ ! -e "$out/params.py" ] && ok || bad "kill at $kill left a params.py (a folder that looks complete)"
  "$BS" sort "${REC[@]}" -o "$out" --resume 2>"$out.log" && ok || bad "resume after $kill failed: $(tail -3 "$out.log")"
  for s in $skipped; do
    grep -q "resume: stage $s is complete" "$out.log" && ok || bad "resume after $kill did not skip $s"
  done
  n_skipped=$(grep -c "resume: stage .* is complete" "$out.log")
  [ "$n_skipped" = "$(echo $skipped | wc -w)" ] && ok || bad "resume after $kill skipped $n_skipped stages, expected $(echo $skipped | wc -w)"
  same_as_ref "$out" "kill at $kill"
done

# a completed run resumed: every stage skipped, same outputs
"$BS" sort "${REC[@]}" -o "$T/ref" --resume 2>"$T/again.log" && ok || bad "resume of a complete run failed"
[ "$(grep -c "resume: stage .* is complete" "$T/again.log")" = 8 ] && ok || bad "a complete run did not skip its 8 stages"
# changed parameters: nothing is skipped (a whole new sort: not under the sanitizers)
if [ -z "${BS_SANITIZED:-}" ]; then
cp -r "$T/ref" "$T/chg"
"$BS" sort "${REC[@]}" -o "$T/chg" --resume --threshold 9 2>"$T/changed.log" && ok || bad "resume with new parameters failed"
grep -q "parameters changed" "$T/changed.log" && ok || bad "no message about changed parameters"
! grep -q "resume: stage .* is complete" "$T/changed.log" && ok || bad "stages were skipped although the parameters changed"
fi
# a damaged checkpoint file is detected (size differs) and its stage re-run
cp -r "$T/ref" "$T/dmg"
truncate -s 100 "$T/dmg/.stages/detect/spike_score.npy"
"$BS" sort "${REC[@]}" -o "$T/dmg" --resume 2>"$T/dmg.log" && ok || bad "resume over a damaged checkpoint failed"
grep -q "resume: stage basis is complete" "$T/dmg.log" && ! grep -q "resume: stage detect is complete" "$T/dmg.log" \
  && ok || bad "damaged detection checkpoint was not re-run"
# the preprocessed recording was removed when the reference run ended: detection, run again, writes it
# again first (the same bytes: the same outputs), and it is removed again at the end
grep -q "preprocess: .* is absent" "$T/dmg.log" && ok || bad "the preprocessed recording was not written again"
[ ! -e "$T/dmg/.stages/preprocess/recording.f16" ] && ok || bad "the preprocessed recording was left behind"
same_as_ref "$T/dmg" "damaged checkpoint"

finish
