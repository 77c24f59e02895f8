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
#         Q35_SAN_JOBS (default 2),
#         Q35_SAN_CASE_LIMIT=S: instead of ctest, run every doctest case of the given targets alone, each
#           for at most S seconds (TSan makes a suite of minutes take hours; a case at a time covers the
#           most kernels in the time there is). One line per case: target, seconds, ok / REPORT / FAILED /
#           timeout (no report in S s), name; a report's or failure's log stays in $build/san_cases.
#           Q35_SAN_DEADLINE=EPOCH stops starting cases after that time; Q35_SAN_CASE_FROM=N starts at a
#           target's N-th case (1-based, as doctest lists them), to resume a run. Exit 1 on any report or
#           failure.
#         e.g.  Q35_SANITIZER=thread Q35_SAN_CASE_LIMIT=300 scripts/sanitize.sh '' q35_tests_kernels q35_tests_moe
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
  # allocator_may_return_null: the tests ask for impossible sizes (tests/launch: 1 PiB) and expect the
  # sim's out_of_memory status, as cudaMalloc returns it; by default the sanitizers abort instead
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:allocator_may_return_null=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  ;;
thread)
  build="${Q35_SAN_BUILD_DIR:-$root/build-tsan}"
  flags="-fsanitize=thread -fno-omit-frame-pointer"
  link="-fsanitize=thread"
  # halt_on_error: a report fails its test; the race_check tests expect exactly that for the broken kernels
  export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1}"
  export Q35_SIM_WORKERS="${Q35_SIM_WORKERS:-2}"
  ;;
*)
  echo "sanitize.sh: Q35_SANITIZER='$sanitizer': expected address or thread" >&2
  exit 2
  ;;
esac
if [ -n "${Q35_SAN_CASE_LIMIT:-}" ] && [ $# -eq 0 ]; then
  echo "sanitize.sh: Q35_SAN_CASE_LIMIT needs the test targets to run" >&2
  exit 2
fi
cmake -S "$root" -B "$build" -DQ35_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$link" >/dev/null
if [ $# -gt 0 ]; then
  cmake --build "$build" -j "$jobs" --target "$@"
else
  cmake --build "$build" -j "$jobs"
fi
if [ -n "${Q35_SAN_CASE_LIMIT:-}" ]; then
  logs="$build/san_cases"
  mkdir -p "$logs"
  bad=0
  for target in "$@"; do
    exe=$(find "$build" -type f -perm -u+x -name "$target" | head -1)
    [ -n "$exe" ] || { echo "sanitize.sh: no executable $target under $build" >&2; exit 2; }
    # doctest's case list sits between two lines of '='; commas in a name would split the filter
    mapfile -t cases < <("$exe" --list-test-cases | sed -n '/^====/,/^====/p' | grep -v -e '^====' -e '^\[doctest\]')
    for i in "${!cases[@]}"; do
      ((i + 1 < ${Q35_SAN_CASE_FROM:-1})) && continue
      if [ -n "${Q35_SAN_DEADLINE:-}" ] && [ "$(date +%s)" -ge "$Q35_SAN_DEADLINE" ]; then
        echo "sanitize.sh: deadline reached"
        exit $bad
      fi
      name=${cases[$i]}
      log="$logs/$target.$i.log"
      t0=$(date +%s)
      rc=0
      # SIGKILL: a catchable signal would run doctest's handler, which TSan reports as signal-unsafe
      (cd "$build" && timeout -s KILL "$Q35_SAN_CASE_LIMIT" "$exe" --test-case="${name//,/?}" >"$log" 2>&1) 2>/dev/null || rc=$?
      if grep -q -e "WARNING: ThreadSanitizer" -e "ERROR: AddressSanitizer" -e "runtime error:" "$log"; then
        result=REPORT bad=1
      elif [ $rc -eq 137 ]; then
        result="timeout (no report in ${Q35_SAN_CASE_LIMIT} s)"
      elif [ $rc -ne 0 ]; then
        result=FAILED bad=1
      elif ! grep -Eq '^\[doctest\] test cases: *[1-9][0-9]* *\| *[1-9]' "$log"; then
        result="FAILED (the filter selected no case)" bad=1  # doctest exits 0 when nothing matches
      else
        result=ok
      fi
      [ "$result" = REPORT ] || [ "${result%% *}" = FAILED ] || rm -f "$log"
      printf '%s\t%4d s\t%s\t%s\n' "$target" $(($(date +%s) - t0)) "$result" "$name"
    done
  done
  exit $bad
fi
# (tests with a TIMEOUT property keep it; a sanitized run may need the longer limits of -R one test)
ctest --test-dir "$build" --output-on-failure -R "$regex" -j "$jobs"
