#!/usr/bin/env bash
# test_install.sh - `cmake --install BUILD --prefix P` (CMakeLists.txt): P/bin/boundsort runs (its
# --version is include/boundsort.h's, the one place the version is written; the pip package reads it
# there too: test_wheel.sh) and sorts a simulated recording; P/include/boundsort/boundsort.h and its module headers
# compile; a separate CMake project finds the package (find_package(boundsort)), links
# boundsort::boundsort_core and opens a recording with it (tests/data/install_consumer). Skipped under
# the sanitizers (the consumer would need their runtime; the release build tests the same rules).
. "$(dirname "$0")/lib.sh"

[ -n "${BS_SANITIZED:-}" ] && { echo "sanitizer build: the release build tests the installation"; exit 77; }
BUILD=$(cd "$(dirname "$BS")" && pwd)
[ -f "$BUILD/CMakeCache.txt" ] || { echo "no CMake build folder holds $BS: skipped"; exit 77; }
v=$(sed -n 's/^#define BOUNDSORT_VERSION "\(.*\)"$/\1/p' "$SRC/include/boundsort.h")
[ -n "$v" ] && ok || bad "no version in include/boundsort.h"

cmake --install "$BUILD" --prefix "$T/p" >"$T/install.log" 2>&1 && ok || bad "cmake --install failed: $(tail -5 "$T/install.log")"
P=$T/p
[ "$("$P/bin/boundsort" --version)" = "boundsort $v" ] && ok || bad "installed --version: $("$P/bin/boundsort" --version)"
[ -f "$P/lib/libboundsort_core.a" ] && [ -f "$P/lib/cmake/boundsort/boundsortConfig.cmake" ] && ok \
  || bad "no library or CMake package under $P/lib"
! grep -q '"\.\./src/' "$P/include/boundsort/boundsort.h" && ok || bad "installed boundsort.h still includes ../src/"
printf '#include <boundsort/boundsort.h>\n#include <boundsort/src/pipeline/sort.h>\nint main(void) { return 0; }\n' >"$T/h.c"
cc -std=c11 -fsyntax-only -I "$P/include" "$T/h.c" && ok || bad "the installed headers do not compile"

"$P/bin/boundsort" simulate -o "$T/sim" --probe linear32 --duration 4 --units 4 --seed 3 -q >/dev/null \
  && "$P/bin/boundsort" sort "$T/sim" -o "$T/out" -q --no-qc 2>/dev/null && ok || bad "the installed boundsort cannot sort"
"$P/bin/boundsort" validate "$T/out" >/dev/null && ok || bad "the installed boundsort's Phy folder does not validate"

cmake -S "$SRC/tests/data/install_consumer" -B "$T/consumer" -DCMAKE_PREFIX_PATH="$P" \
  -DCMAKE_C_COMPILER="$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")" >"$T/consumer.log" 2>&1 \
  && cmake --build "$T/consumer" >>"$T/consumer.log" 2>&1 && ok || bad "the consumer project does not build: $(tail -8 "$T/consumer.log")"
[ "$("$T/consumer/consumer" "$T/sim")" = "$v 32 30000 120000" ] && ok || bad "consumer printed: $("$T/consumer/consumer" "$T/sim")"
finish
