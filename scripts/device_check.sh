#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build for its architecture, run the CUDA tests on the device, the
# end-to-end benchmarks (qwen35_generate --bench: synthetic full-size Q4_K_M models, docs/e2e_benchmarks.md;
# experts in host memory under 24 and 16 GB budgets, docs/moe.md), host-resident experts against
# all-resident logits, the serving benchmark (docs/server.md) and the kernel benchmarks; write logs and
# print a short summary table last.
#   scripts/device_check.sh [LOG_DIR] [STAGES]
#     LOG_DIR  default device_logs/
#     STAGES   comma-separated, run in this order of priority (default all):
#              tests, e2e, vram, experts, server, kernels (the builds they need always run)
#   Q35_DEVICE_BUDGET_S  seconds for the whole run (default 540: the device tool stops a command at 600)
# With $OUT set (the device tool), the summary, the JSON results and all logs (device_logs.tgz) are
# copied there at the end, also when a stage fails. On the device tool's machine, first run
# `scripts/device_prep.sh on` here and carry .device (the build dependencies; docs/benchmarks.md,
# "On a lent GPU"):
#   run(command="bash scripts/device_check.sh", timeout_s=600, carry=[".device"])
# A stage that the budget leaves no time for is reported as "no time" (run it in a second call:
# `bash scripts/device_check.sh device_logs server,kernels`; the build outputs stay on a warm machine).
# Never changes clocks or resets the GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
logs=${1:-device_logs}
stages=${2:-tests,e2e,vram,experts,server,kernels}
budget=${Q35_DEVICE_BUDGET_S:-540}
mkdir -p "$logs"
jobs=$(nproc)
start=$SECONDS
source scripts/device_env.sh >"$logs/env.log" 2>&1
cat "$logs/env.log"

declare -A rc secs
order=()
want() { [[ ,$stages, == *,$1,* ]]; }
# Seconds a stage may take: at most $1, never past the budget (0: no time left, the stage is skipped).
left() {
  local l=$((budget - 15 - (SECONDS - start)))  # 15 s for the summary and the copy to $OUT
  ((l < 20)) && l=0
  ((l < $1)) && echo $l || echo $1
}
# stage NAME CAP COMMAND...: runs COMMAND under `timeout` within the budget, records rc and seconds.
stage() {
  local name=$1 cap t0
  cap=$(left "$2")
  shift 2
  order+=("$name")
  if ((cap == 0)); then
    rc[$name]="no time"
    secs[$name]=0
    return
  fi
  t0=$SECONDS
  if declare -F "$1" >/dev/null; then  # a function of this script: in a child bash (timeout runs programs)
    export -f "$1"
    timeout "$cap" bash -c '"$@"' _ "$@"
  else
    timeout "$cap" "$@"
  fi
  local r=$?
  ((r == 124)) && rc[$name]="timeout ${cap}s" || rc[$name]=$r
  secs[$name]=$((SECONDS - t0))
}
pack() {
  [[ -n ${OUT:-} && -d ${OUT:-} ]] || return 0
  cp "$logs/summary.txt" "$OUT/" 2>/dev/null
  for j in e2e.json e2e_vram.json server_bench.json server_bench_gemm.json server_bench_fast.json bench.json; do cp "$logs/$j" "$OUT/" 2>/dev/null; done
  tar czf "$OUT/device_logs.tgz" --exclude='*.bin' "$logs" 2>/dev/null
}
trap pack EXIT

gpu=$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | head -1)
cap=$(echo "$gpu" | awk -F', ' '{print $3}' | tr -d '.')
echo "GPU: $gpu (sm_$cap)" | tee "$logs/gpu.txt"
nvidia-smi >>"$logs/gpu.txt" 2>&1
nvcc --version | tail -2 >>"$logs/gpu.txt"

# Two build trees at once: the CUDA tests and kernel benchmarks (q35_cuda_all; their sim twins would
# double the build), and the programs (qwen35_generate_cuda, qwen35_server_cuda) in the background, so
# a problem in one costs only the stages that need it.
build=build-device
e2e_build=build-device-e2e
e2e_targets=(qwen35_generate_cuda)
want server && e2e_targets+=(qwen35_server_cuda)
(cmake -B "$e2e_build" -DQ35_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cap" -DQ35_BUILD_EXAMPLES=ON \
   -DQ35_BUILD_TESTS=OFF -DQ35_BUILD_BENCHMARKS=OFF && timeout "$(left 330)" cmake --build "$e2e_build" -j"$jobs" \
   --target "${e2e_targets[@]}") >"$logs/build_e2e.log" 2>&1 &
e2e_build_pid=$!
if want tests || want kernels; then
  cmake -B "$build" -DQ35_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cap" -DQ35_BUILD_EXAMPLES=OFF \
    >"$logs/configure.log" 2>&1
  stage build "$(left 330)" cmake --build "$build" -j"$jobs" --target q35_cuda_all >"$logs/build.log" 2>&1
  python3 scripts/check_ptxas.py "$logs/build.log" --table >"$logs/ptxas.txt" 2>&1
  [[ ${rc[build]} != 0 ]] && tail -30 "$logs/build.log"
fi
if want tests && [[ ${rc[build]:-1} == 0 ]]; then
  stage tests 120 ctest --test-dir "$build" -R '^cuda\.' --output-on-failure >"$logs/tests.log" 2>&1
fi

wait "$e2e_build_pid"
e2e_build_rc=$?
if ((e2e_build_rc != 0)); then
  tail -30 "$logs/build_e2e.log"
  echo "the programs' build failed (rc $e2e_build_rc, $logs/build_e2e.log): no end-to-end stages"
fi
gen=$e2e_build/examples/qwen35_generate/qwen35_generate_cuda
if ((e2e_build_rc == 0)); then
  # End to end: 9B, 35B-A3B, then 27B (the JSON is rewritten after each model: a time-out keeps those done).
  want e2e && stage e2e 150 "$gen" --bench --bench-model 9B --bench-model 35B-A3B --bench-model 27B \
    --bench-json "$logs/e2e.json" >"$logs/e2e.log" 2>&1
  # Experts in host memory: 35B-A3B and 122B-A10B under 24 GB and 16 GB budgets (hit rate, host bytes
  # per token, zero-copy bandwidth; docs/moe.md), after an all-resident row (200G: everything on the
  # device) whose logits each budget row must equal bit for bit (--bench fails otherwise). One context
  # and one prompt length to fit the budget.
  want vram && stage vram 200 "$gen" --bench --bench-model 35B-A3B --bench-model 122B-A10B --vram 200G,24G,16G \
    --bench-ctx 0 --bench-pp 512 --bench-json "$logs/e2e_vram.json" >"$logs/e2e_vram.log" 2>&1
  # Experts in host memory on the GPU give the all-resident logits bit for bit (zero-copy reads through
  # the index, promotions copied on the side stream and landed by event; -n 40: two rebalances).
  export gen logs
  experts_run() {
    local r=0 cache flag
    for cache in none 0 1 3; do
      flag=()
      [[ $cache != none ]] && flag=(--expert-cache "$cache")
      "$gen" -m tests/data/tiny_moe_q4km.gguf -p "The quick brown fox jumps over the lazy dog, again and again" \
        -n 40 --temp 0 "${flag[@]}" --dump-logits "$logs/experts_$cache.bin" >>"$logs/experts.log" 2>&1 || r=1
      [[ $cache != none ]] && { cmp "$logs/experts_none.bin" "$logs/experts_$cache.bin" >>"$logs/experts.log" 2>&1 || r=1; }
    done
    return $r
  }
  want experts && stage experts 40 experts_run
  # Serving (issue 21): D, P and A against the synthetic 9B (needs the openai client: .device/whl).
  want server && stage server 240 bash scripts/device_server_bench.sh "$logs" 9B
fi

if want kernels && [[ ${rc[build]:-1} == 0 ]]; then
  stage kernels 240 "$build/benchmarks/q35_bench_cuda" --benchmark_min_time=0.1 --benchmark_out="$logs/bench.json" \
    --benchmark_out_format=json >"$logs/bench.log" 2>&1
fi

{
  echo
  echo "== summary ($gpu), budget ${budget}s, took $((SECONDS - start))s =="
  echo "programs' build: rc=$e2e_build_rc"
  for s in "${order[@]}"; do
    extra=""
    [[ $s == tests ]] && extra=" ($(grep -Eo '[0-9]+% tests passed.*' "$logs/tests.log" | head -1))"
    printf '%-8s rc=%s %ss%s\n' "$s" "${rc[$s]}" "${secs[$s]}" "$extra"
  done
  for s in tests e2e vram experts server kernels; do
    want "$s" && [[ -z ${rc[$s]:-} ]] && echo "$s: not run (its build failed)"
  done
  [[ -f $logs/ptxas.txt ]] && tail -1 "$logs/ptxas.txt"
  python3 scripts/device_summary.py "$logs"
} 2>&1 | tee "$logs/summary.txt"
failed=0
for s in "${order[@]}"; do [[ ${rc[$s]} == 0 || ${rc[$s]} == "no time" ]] || failed=1; done
((e2e_build_rc == 0)) || failed=1
exit $failed
