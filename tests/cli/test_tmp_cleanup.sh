#!/usr/bin/env bash
# test_tmp_cleanup.sh - no temporary file outlives a run (src/common/tmpfiles.h): `sort --resume`,
# `qc` and `report` remove the stale "<name>.tmp-<pid>" files (pid not a live process) in OUT and
# OUT/.stages/... at start and keep those of live processes and every other name; `report -o FILE`
# also those of FILE; a SIGTERM in the middle of a sort removes the open temporaries, exits 143 with
# a message saying how to resume, and `--resume` then finishes with outputs identical to an
# uninterrupted run.
. "$(dirname "$0")/lib.sh"

# Sorts without qc (the qc command is run on its own below); under the sanitizers (BS_SANITIZED=1,
# ~20x slower) a 5-s recording, still long enough to catch detection with its files open
duration=12
[ -n "${BS_SANITIZED:-}" ] && duration=5
"$BS" simulate -o "$T/sim" --probe linear32 --duration $duration --units 8 --seed 11 -q || { echo "simulate failed"; exit 1; }
REC=("$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000 --no-qc)
"$BS" sort "${REC[@]}" -o "$T/ref" -q && ok || bad "reference sort failed"

sh -c 'exit 0' & dead=$!; wait $dead   # a pid that is no longer a live process
live=$$                                # this shell: alive
kill -0 "$dead" 2>/dev/null && { echo "pid $dead is alive again; cannot test"; exit 77; }

# plant DIR: a stale and a live temporary in DIR and DIR/.stages/detect, and names that only look alike
plant() {
  local d
  for d in "$1" "$1/.stages/detect"; do
    : >"$d/spike_times.npy.tmp-$dead"; : >"$d/spike_times.npy.tmp-$live"
    : >"$d/notes.tmp-12x"; : >"$d/notes.tmp-"
  done
}
# swept DIR WHAT: the stale ones are gone, the others kept
swept() {
  local d
  for d in "$1" "$1/.stages/detect"; do
    [ ! -e "$d/spike_times.npy.tmp-$dead" ] && ok || bad "$2: stale $d/spike_times.npy.tmp-$dead left"
    [ -e "$d/spike_times.npy.tmp-$live" ] && ok || bad "$2: removed $d/spike_times.npy.tmp-$live of a live process"
    [ -e "$d/notes.tmp-12x" ] && [ -e "$d/notes.tmp-" ] && ok || bad "$2: removed a file that is not a temporary in $d"
  done
}

cp -r "$T/ref" "$T/s"; plant "$T/s"
"$BS" sort "${REC[@]}" -o "$T/s" --resume 2>"$T/s.log" && ok || bad "sort --resume failed: $(tail -3 "$T/s.log")"
grep -q "removed 2 temporary files left by an interrupted run" "$T/s.log" && ok || bad "sort --resume: no message about the removed temporaries"
swept "$T/s" "sort --resume"

cp -r "$T/ref" "$T/q"; plant "$T/q"
"$BS" qc "$T/q" -q 2>"$T/q.log" && ok || bad "qc failed: $(tail -3 "$T/q.log")"
swept "$T/q" "qc"

cp -r "$T/ref" "$T/r"; plant "$T/r"
: >"$T/page.html.tmp-$dead"; : >"$T/other.html.tmp-$dead"
"$BS" report "$T/r" -o "$T/page.html" -q 2>"$T/r.log" && ok || bad "report failed: $(tail -3 "$T/r.log")"
swept "$T/r" "report"
[ ! -e "$T/page.html.tmp-$dead" ] && ok || bad "report -o: stale page.html.tmp-$dead left"
[ -e "$T/other.html.tmp-$dead" ] && ok || bad "report -o: removed the temporary of another file beside FILE"

# SIGTERM in the middle of detection (once its streamed files are open), then --resume
out="$T/term"
"$BS" sort "${REC[@]}" -o "$out" -q 2>"$T/term.log" & pid=$!
for _ in $(seq 6000); do
  compgen -G "$out/.stages/detect/*.tmp-*" >/dev/null && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
compgen -G "$out/.stages/detect/*.tmp-*" >/dev/null && ok || bad "no detection temporaries seen while the sort ran"
kill -TERM "$pid"; wait "$pid"; rc=$?
[ "$rc" = 143 ] && ok || bad "SIGTERM: exit $rc, expected 143"
grep -q "interrupted by SIGTERM.*--resume" "$T/term.log" && ok || bad "SIGTERM: no message saying how to resume: $(cat "$T/term.log")"
left=$(find "$out" -name '*.tmp-*' | wc -l)
[ "$left" = 0 ] && ok || bad "SIGTERM left $left temporaries: $(find "$out" -name '*.tmp-*')"
[ ! -e "$out/params.py" ] && ok || bad "SIGTERM left a params.py (a folder that looks complete)"
"$BS" sort "${REC[@]}" -o "$out" --resume -q 2>"$T/term2.log" && ok || bad "resume after SIGTERM failed: $(tail -3 "$T/term2.log")"
for f in "$T"/ref/*.npy "$T"/ref/*.tsv "$T"/ref/params.py; do
  cmp -s "$f" "$out/$(basename "$f")" || bad "resume after SIGTERM: $(basename "$f") differs from the uninterrupted run"
done
ok

finish
