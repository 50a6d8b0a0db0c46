# test_cli_errors.sh - issue 24 items 3 and 4: inputs that are not regular files never hang (a FIFO
# as --probe or as a Phy folder's params.py, a folder as --probe or as an npy file), and exit codes and
# messages that say what went wrong: implausible sampling rates (bad input, --fs-unchecked overrides),
# output that cannot be written (6, I/O error), a qc failure after a complete Phy folder (sort exits 0
# with a warning, qc with the failure's own code), --mem above the RAM (warning), a thread count whose
# overhead cannot fit the machine (exit 3), an unknown option given last, an empty -o, the --threads
# range and a JSON file past cJSON's nesting limit.
. "$(dirname "$0")/lib.sh"

"$BS" simulate -o "$T/sim" --duration 3 --units 6 --probe linear32 -q >/dev/null 2>&1 ||
  { bad "simulate failed"; finish; exit; }
R=$T/sim/recording.bin
P=$T/sim/probe.json
TO="timeout 20" # a hang fails the check (exit 124) instead of blocking the test

# --- hangs: a FIFO or a folder where a file is expected -------------------------------------------
mkfifo "$T/fifo"
expect_fixed 2 "is a FIFO (named pipe)" -- $TO "$BS" info "$R" --probe "$T/fifo" --fs 30000
expect_fixed 2 "is a FIFO (named pipe)" -- $TO "$BS" sort "$R" --probe "$T/fifo" --fs 30000 -o "$T/o_fifo"
expect_fixed 2 "is a folder, expected a file" -- $TO "$BS" info "$R" --probe "$T/sim" --fs 30000

"$BS" sort "$R" --probe "$P" --fs 30000 -o "$T/out" --no-qc -q 2>"$T/sort_err.txt"
check "sort of the simulated recording exits 0" test $? -eq 0
cp -r "$T/out" "$T/pfifo"
rm "$T/pfifo/params.py"; mkfifo "$T/pfifo/params.py"
expect_fixed 2 "1 violation" -- $TO "$BS" validate "$T/pfifo"
check "validate names the FIFO" grep -qF "params.py: is a FIFO (named pipe)" "$T/out.txt"
expect_fixed 2 "is a FIFO (named pipe)" -- $TO "$BS" report "$T/pfifo" -o "$T/pfifo.html" -q
cp -r "$T/out" "$T/npydir"
rm "$T/npydir/spike_times.npy"; mkdir "$T/npydir/spike_times.npy"
expect_fixed 2 "spike_times.npy: is a folder, expected a file" -- $TO "$BS" qc "$T/npydir" -q

# --- qc failing after a complete Phy folder ---------------------------------------------------------
# qc_metrics.tsv is a folder: qc cannot rename its output into place (an I/O error, 6); the Phy folder
# is complete, so sort warns and exits 0
mkdir -p "$T/qcfail/qc/qc_metrics.tsv/x"
expect_fixed 0 "warning: the Phy folder is complete, but qc failed (I/O error" -- \
  "$BS" sort "$R" --probe "$P" --fs 30000 -o "$T/qcfail" -q
check "the Phy folder is there" test -s "$T/qcfail/params.py" -a -s "$T/qcfail/spike_times.npy"
expect_fixed 6 "cannot rename into place" -- "$BS" qc "$T/qcfail" -q

# --- qc at a high sampling rate: says why it is slow and shows progress --------------------------------
hf_dur=2; [ -n "${BS_SANITIZED:-}" ] && hf_dur=1   # the sanitizers are ~20x slower
"$BS" simulate -o "$T/hf" --duration $hf_dur --units 4 --probe linear32 --fs 100000 -q >/dev/null 2>&1
"$BS" sort "$T/hf/recording.bin" --probe "$T/hf/probe.json" --fs 100000 -o "$T/hfo" --no-qc -q 2>/dev/null
check "sort at 100 kHz" test -s "$T/hfo/spike_times.npy"
expect_fixed 0 "each PCA fit solves a 300 x 300 eigenproblem" -- "$BS" qc "$T/hfo"
check "qc shows its PCA progress by unit" grep -q "qc pca .* units" "$T/err.txt"

# --- sampling rates ---------------------------------------------------------------------------------
expect_fixed 2 "sampling rate 1e+12 Hz is outside the plausible 1000 Hz to 1000000 Hz" -- \
  "$BS" plan "$R" --probe "$P" --fs 1e12
expect_fixed 2 "--fs-unchecked" -- "$BS" info "$R" --probe "$P" --fs 500
expect 0 "" "$BS" info "$R" --probe "$P" --fs-unchecked 500
expect 0 "" "$BS" info "$R" --probe "$P" --fs 1000000

# --- output that cannot be written: 6 ---------------------------------------------------------------
expect_fixed 6 "cannot write the memory trace" -- \
  "$BS" sort "$R" --probe "$P" --fs 30000 -o "$T/o_full" -q --no-qc --mem-trace /dev/full

# --- memory budget and threads against the machine's RAM ---------------------------------------------
expect_fixed 0 "is more than this machine's RAM" -- "$BS" plan "$R" --probe "$P" --fs 30000 --mem 1000T
# (a budget the plan fits at 4096 threads, so that the machine's check is the one that refuses)
expect_fixed 3 "does not fit this machine: 4096 threads" -- "$BS" plan "$R" --probe "$P" --fs 30000 --threads 4096 --mem 64G
check "plan's summary line agrees with its refusal" grep -qF "fits the budget, but NOT THIS MACHINE" "$T/out.txt"
check "plan's summary line never says only 'fits' when it refuses" test "$(grep -c ': fits$' "$T/out.txt")" = 0
"$BS" plan "$R" --probe "$P" --fs 30000 --threads 4096 --mem 64G --json 2>/dev/null | $PY -c "
import json, sys; d = json.load(sys.stdin); sys.exit(0 if d['fits'] and not d['fits_machine'] else 1)" \
  && ok || bad "plan --json: fits_machine is not false at 4096 threads"
expect_fixed 1 "thread count in 1..4096" -- "$BS" sort "$R" --probe "$P" --fs 30000 -o "$T/x" --threads 5000
expect_fixed 1 "thread count in 1..4096" -- "$BS" qc "$T/out" --threads 0

# --- option parsing ----------------------------------------------------------------------------------
expect_line 1 "boundsort sort: unknown option --bogus" -- "$BS" sort "$R" -o "$T/x" --bogus
expect_line 1 "boundsort plan: unknown option --bogus" -- "$BS" plan "$R" --bogus
expect_line 1 "boundsort info: unknown option --bogus" -- "$BS" info "$R" --bogus
expect_line 1 "boundsort qc: unknown option --bogus" -- "$BS" qc "$T/out" --bogus
expect_fixed 1 "unknown option --bogus" -- "$BS" simulate -o "$T/x" --bogus
expect_line 1 "boundsort sort: option --probe needs a value" -- "$BS" sort "$R" -o "$T/x" --probe
expect_line 1 "boundsort sort: option --mem needs a value" -- "$BS" sort "$R" -o "$T/x" --mem
expect_line 1 "boundsort sort: option -o: the value is empty (''): expected a path, name or number" -- \
  "$BS" sort "$R" --probe "$P" --fs 30000 -o ""
expect_fixed 1 "option --probe: the value is empty" -- "$BS" info "$R" --probe "" --fs 30000

# --- JSON past the nesting limit ----------------------------------------------------------------------
$PY -c "print('[' * 1200 + ']' * 1200)" >"$T/deep.json"
expect_fixed 2 "JSON nested deeper than the limit of 1000 levels" -- "$BS" info "$R" --probe "$T/deep.json" --fs 30000
printf '{"probes": [' >"$T/broken.json"
expect_fixed 2 "not valid JSON (syntax error near byte" -- "$BS" info "$R" --probe "$T/broken.json" --fs 30000

finish
