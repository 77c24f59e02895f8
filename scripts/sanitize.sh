#!/usr/bin/env bash
# Builds the sim backend's tests with a sanitizer and runs them. Not in CI: a build takes about an hour on
# 2 cores and the tests run several times slower.
#
#   address (default)  AddressSanitizer + UndefinedBehaviorSanitizer (leak detection on, every report
#                      fatal): on the sim a kernel's out-of-bounds read or write is a host access, so ASan
#                      sees it; so are the host sides (decoder, expert store, scheduler, server, I/O).
#   thread             ThreadSanitizer with the sim's race detector (include/q35/sim/race_check.hpp):
#                      every emulated thread is a TSan fiber, ordered only by barriers, warp collectives
#                      and atomics, so a kernel's shared- or global-memory race is reported even when this
#                      schedule gave the right bytes; blocks run on two workers (Q35_SIM_WORKERS=2) for
#                      races between blocks; and the server's HTTP threads against its scheduler.
#                      The sim.race_check.* tests check the detector itself: one clean kernel, five
#                      broken ones that must be reported.
#
# Usage: [Q35_SANITIZER=address|thread] scripts/sanitize.sh [ctest regex (default: every test)] [targets ...]
#   e.g.  scripts/sanitize.sh 'server\.scheduler' qwen35_server_scheduler_tests
#         Q35_SANITIZER=thread scripts/sanitize.sh 'sim\.(race_check|attention|gdn)' q35_race_demo \
#           q35_tests_attention q35_tests_gdn
#   env:  Q35_SANITIZER (default address), Q35_SAN_BUILD_DIR (default build-asan or build-tsan),
#         Q35_SAN_JOBS (default 2)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
sanitizer="${Q35_SANITIZER:-address}"
jobs="${Q35_SAN_JOBS:-${Q35_ASAN_JOBS:-2}}"
regex="${1:-.}"
shift || true
case "$sanitizer" in
address)
  build="${Q35_SAN_BUILD_DIR:-${Q35_ASAN_BUILD_DIR:-$root/build-asan}}"
  flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
  link="-fsanitize=address,undefined"
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  ;;
thread)
  build="${Q35_SAN_BUILD_DIR:-$root/build-tsan}"
  flags="-fsanitize=thread -fno-omit-frame-pointer"
  link="-fsanitize=thread"
  # halt_on_error: a report fails its test; the race_check tests expect exactly that for the broken kernels
  export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"
  export Q35_SIM_WORKERS="${Q35_SIM_WORKERS:-2}"
  ;;
*)
  echo "sanitize.sh: Q35_SANITIZER='$sanitizer': expected address or thread" >&2
  exit 2
  ;;
esac
cmake -S "$root" -B "$build" -DQ35_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$link" >/dev/null
if [ $# -gt 0 ]; then
  cmake --build "$build" -j "$jobs" --target "$@"
else
  cmake --build "$build" -j "$jobs"
fi
# (tests with a TIMEOUT property keep it; a sanitized run may need the longer limits of -R one test)
ctest --test-dir "$build" --output-on-failure -R "$regex" -j "$jobs"
