#!/usr/bin/env bash
# test.sh - the whole test suite: dependencies, a release build and its tests,
# then a build with AddressSanitizer + UndefinedBehaviorSanitizer and the same
# tests, then each libFuzzer target run briefly on its corpus.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/deps.sh"
jobs=$(nproc)

echo "== release build and tests"
bash "$root/scripts/build.sh" "$root/build"
(cd "$root/build" && ctest --output-on-failure -j "$jobs")

echo "== sanitizer build (ASan + UBSan, -O2 -g; the C code, no CUDA backend) and tests"
BUILD_TYPE=RelWithDebInfo bash "$root/scripts/build.sh" "$root/build-asan" -DBOUNDSORT_SANITIZE=ON \
  -DCMAKE_C_COMPILER=clang -DBOUNDSORT_FUZZ=ON -DBOUNDSORT_CUDA=OFF
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 BS_SANITIZED=1
(cd "$root/build-asan" && ctest --output-on-failure -j "$jobs" -E "${BS_ASAN_EXCLUDE:-^$}")

echo "== fuzzing each parser for ${BS_FUZZ_SECONDS:=20} s"
for f in "$root"/build-asan/fuzz/*_fuzzer; do
  [ -x "$f" ] || continue
  name=$(basename "$f" _fuzzer); name=${name#fuzz_}
  work=$(mktemp -d)
  cp -r "$root/fuzz/corpus/$name/." "$work/"
  "$f" -max_total_time="$BS_FUZZ_SECONDS" -max_len=65536 -timeout=10 "$work" >"$work.log" 2>&1 \
    || { tail -40 "$work.log"; echo "fuzz: $name found a failure" >&2; exit 1; }
  echo "fuzz $name: $(grep -c . <(ls "$work")) corpus files, no failure"
  rm -rf "$work" "$work.log"
done
echo "all test stages passed"
