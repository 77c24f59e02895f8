#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan), and for each one replays its seed corpus, then
# fuzzes it for a bounded time and reports the number of executions and findings:
#   gguf  the GGUF reader and the qwen35 binding; every tensor of a parsed file is also dequantized by
#         the dequant kernel on the sim backend (Boost.Context fibers) from an exact-size copy, so ASan
#         checks that the kernel reads only the bytes the reader validated (fuzz/gguf_fuzz.cpp);
#   api   qwen35_server's protocol layer: request bodies, generated text whole against streamed, the
#         response bodies and SSE frames, the Authorization check (fuzz/api_fuzz.cpp);
#   tokenizer  encode/decode round trips and the stream decoder on the bundled tiny model's
#         vocabulary, the real pre-tokenizer regex on PCRE2 (fuzz/tokenizer_fuzz.cpp).
#
# Usage: scripts/fuzz.sh [seconds per target = 60] [target ...]   (default: every target)
#   env: Q35_FUZZ_BUILD_DIR (default build-fuzz), Q35_FUZZ_JOBS (default 2, build parallelism)
#
# Needs clang with its compiler-rt runtimes (libFuzzer, ASan, UBSan). On Debian 12:
#   apt-get update && apt-get install -y clang-14 libclang-rt-14-dev cmake ninja-build
# (libclang-rt-14-dev ships libclang_rt.fuzzer-x86_64.a and the sanitizer runtimes.)
#
# Exit status: 0 when every replay and fuzzing run found nothing; 1 otherwise, with the reproducers
# left in $Q35_FUZZ_BUILD_DIR/findings/TARGET/.
set -euo pipefail

seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: $0 [seconds >= 1] [gguf|api|tokenizer ...]" >&2
  exit 2
fi
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf api tokenizer)
for t in "${targets[@]}"; do
  if [ "$t" != gguf ] && [ "$t" != api ] && [ "$t" != tokenizer ]; then
    echo "fuzz: unknown target '$t' (gguf, api, tokenizer)" >&2
    exit 2
  fi
done
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${Q35_FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="${Q35_FUZZ_JOBS:-2}"
cxx="${CXX_FUZZ:-$(command -v clang++ || command -v clang++-14 || true)}"
if [ -z "$cxx" ]; then
  echo "fuzz: clang++ not found (apt-get install -y clang-14 libclang-rt-14-dev)" >&2
  exit 1
fi

cmake -S "$root/fuzz" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]/%/_fuzz}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

failed=0
for t in "${targets[@]}"; do
  fuzzer="$build/${t}_fuzz"
  seeds="$root/fuzz/corpus/$t"
  findings="$build/findings/$t"
  work="$build/corpus/$t"  # new inputs go here; the committed seed corpus is never modified
  rm -rf "$findings"
  mkdir -p "$findings" "$work"

  echo "== $t: replaying the seed corpus ($(find "$seeds" -type f | wc -l) files)"
  if ! "$fuzzer" -runs=0 -artifact_prefix="$findings/" "$seeds" >"$build/$t.replay.log" 2>&1; then
    tail -40 "$build/$t.replay.log"
    echo "fuzz: $t FAILED while replaying the seed corpus" >&2
    failed=1
    continue
  fi

  echo "== $t: fuzzing for ${seconds}s"
  status=0
  "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -dict="$root/fuzz/$t.dict" -artifact_prefix="$findings/" "$work" "$seeds" \
    >"$build/$t.fuzz.log" 2>&1 || status=$?

  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/$t.fuzz.log" | grep -o '[0-9]*$' | tail -1 || true)"
  n_findings="$(find "$findings" -type f | wc -l)"
  echo "$t executions: ${execs:-unknown}"
  echo "$t findings: $n_findings"
  if [ "$status" -ne 0 ] || [ "$n_findings" -ne 0 ] || [ -z "$execs" ]; then
    tail -60 "$build/$t.fuzz.log"
    echo "fuzz: $t FAILED (libFuzzer exit $status, $n_findings finding(s) in $findings)" >&2
    failed=1
    continue
  fi
  echo "fuzz: $t OK"
done
exit "$failed"
