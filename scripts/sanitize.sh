#!/usr/bin/env bash
# Builds the sim backend's tests with AddressSanitizer + UndefinedBehaviorSanitizer (leak detection on,
# every report fatal) and runs them: on the sim a kernel's out-of-bounds read or write is a host
# access, so ASan sees it; so are the host sides (decoder, expert store, scheduler, server, I/O).
# Not in CI: the build takes about an hour on 2 cores and the tests run 2-3 times slower.
#
# Usage: scripts/sanitize.sh [ctest regex (default: every test)] [build targets ...]
#   e.g.  scripts/sanitize.sh 'server\.scheduler' qwen35_server_scheduler_tests
#   env:  Q35_ASAN_BUILD_DIR (default build-asan), Q35_ASAN_JOBS (default 2)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${Q35_ASAN_BUILD_DIR:-$root/build-asan}"
jobs="${Q35_ASAN_JOBS:-2}"
regex="${1:-.}"
shift || true
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cmake -S "$root" -B "$build" -DQ35_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
if [ $# -gt 0 ]; then
  cmake --build "$build" -j "$jobs" --target "$@"
else
  cmake --build "$build" -j "$jobs"
fi
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# (tests with a TIMEOUT property keep it; a sanitized run may need the longer limits of -R one test)
ctest --test-dir "$build" --output-on-failure -R "$regex" -j "$jobs"
