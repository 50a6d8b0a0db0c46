# test_full_disk.sh - a sort whose output folder is on a full disk (a 32-KiB tmpfs) exits 6 (I/O error,
# src/common/status.h) with the failing file and "No space left on device", not 2 (bad input).
# Mounting needs root: skipped (77) where the mount fails.
. "$(dirname "$0")/lib.sh"

mkdir -p "$T/small"
mount -t tmpfs -o size=32k tmpfs "$T/small" 2>/dev/null || { echo "skipped: cannot mount a tmpfs (needs root)"; exit 77; }
trap 'umount "$T/small" 2>/dev/null' EXIT
"$BS" simulate -o "$T/sim" --duration 3 --units 6 --probe linear32 -q >/dev/null 2>&1 ||
  { bad "simulate failed"; finish; exit; }
expect_fixed 6 "No space left on device" -- \
  "$BS" sort "$T/sim/recording.bin" --probe "$T/sim/probe.json" --fs 30000 -o "$T/small/out" -q
finish
