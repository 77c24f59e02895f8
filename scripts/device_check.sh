#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build tests, benchmarks and qwen35_generate for this GPU's
# architecture, run the test suite on the device, the end-to-end benchmark (qwen35_generate --bench:
# synthetic full-size Q4_K_M models, docs/e2e_benchmarks.md), the kernel benchmarks, write logs, and
# print a short summary table last.
#   scripts/device_check.sh [LOG_DIR]        (default: device_logs/)
# Budget: under 12 minutes on a 16-core machine (each stage gets at most what is left of 690 s).
# Never changes clocks or resets the GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${1:-device_logs}
mkdir -p "$logs"
jobs=$(nproc)
start=$SECONDS

gpu=$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | head -1)
cap=$(echo "$gpu" | awk -F', ' '{print $3}' | tr -d '.')
echo "GPU: $gpu (sm_$cap)" | tee "$logs/gpu.txt"
nvidia-smi >>"$logs/gpu.txt" 2>&1

build=build-device
cmake -B "$build" -DQ35_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cap" -DQ35_BUILD_EXAMPLES=OFF \
  >"$logs/configure.log" 2>&1
# qwen35_generate_cuda (for --bench) in its own build dir, in the background, so a problem there costs
# only the end-to-end stage.
e2e_build=build-device-e2e
(cmake -B "$e2e_build" -DQ35_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cap" -DQ35_BUILD_EXAMPLES=ON \
   -DQ35_BUILD_TESTS=OFF -DQ35_BUILD_BENCHMARKS=OFF && timeout 420 cmake --build "$e2e_build" -j"$jobs" \
   --target qwen35_generate_cuda) >"$logs/build_e2e.log" 2>&1 &
e2e_build_pid=$!
# Seconds a stage may take: at most $1, and never past the 690 s budget.
left() {
  local l=$((690 - (SECONDS - start)))
  ((l < 10)) && l=10
  ((l < $1)) && echo $l || echo $1
}
# q35_cuda_all: the CUDA tests and benchmarks only (their sim twins would double the build).
if ! timeout 300 cmake --build "$build" -j"$jobs" --target q35_cuda_all >"$logs/build.log" 2>&1; then
  tail -40 "$logs/build.log"
  echo "build failed (see $logs/build.log)"
  exit 1
fi
python3 scripts/check_ptxas.py "$logs/build.log" --table >"$logs/ptxas.txt" 2>&1
build_s=$((SECONDS - start))

timeout "$(left 150)" ctest --test-dir "$build" -R '^cuda\.' --output-on-failure >"$logs/tests.log" 2>&1
tests_rc=$?
test_s=$((SECONDS - start - build_s))

# End to end: 9B, 35B-A3B, then 27B (the JSON is rewritten after each model, so a time-out keeps those done).
wait "$e2e_build_pid"
e2e_build_rc=$?
e2e_start=$SECONDS
if ((e2e_build_rc == 0)); then
  timeout "$(left 210)" "$e2e_build/examples/qwen35_generate/qwen35_generate_cuda" --bench \
    --bench-json "$logs/e2e.json" >"$logs/e2e.log" 2>&1
  e2e_rc=$?
  # Experts in host memory: 35B-A3B and 122B-A10B under 24 GB and 16 GB budgets (hit rate, host bytes
  # per token, zero-copy bandwidth; docs/moe.md). One context and one prompt length to fit the budget.
  timeout "$(left 200)" "$e2e_build/examples/qwen35_generate/qwen35_generate_cuda" --bench --bench-model 35B-A3B \
    --bench-model 122B-A10B --vram 24G,16G --bench-ctx 0 --bench-pp 512 --bench-json "$logs/e2e_vram.json" \
    >"$logs/e2e_vram.log" 2>&1
  vram_rc=$?
  # Experts in host memory on the GPU give the all-resident logits bit for bit (zero-copy reads through
  # the index, promotions copied on the side stream and landed by event; -n 40: two rebalances).
  experts_rc=0
  for cache in none 0 1 3; do
    flag=()
    [[ $cache != none ]] && flag=(--expert-cache "$cache")
    timeout 60 "$e2e_build/examples/qwen35_generate/qwen35_generate_cuda" -m tests/data/tiny_moe_q4km.gguf \
      -p "The quick brown fox jumps over the lazy dog, again and again" -n 40 --temp 0 "${flag[@]}" \
      --dump-logits "$logs/experts_$cache.bin" >>"$logs/experts.log" 2>&1 || experts_rc=1
    [[ $cache != none ]] && { cmp "$logs/experts_none.bin" "$logs/experts_$cache.bin" >>"$logs/experts.log" 2>&1 || experts_rc=1; }
  done
else
  tail -20 "$logs/build_e2e.log"
  echo "qwen35_generate_cuda build failed (see $logs/build_e2e.log): no end-to-end results"
  e2e_rc=$e2e_build_rc
  vram_rc=$e2e_build_rc
  experts_rc=$e2e_build_rc
fi
e2e_s=$((SECONDS - e2e_start))

timeout "$(left 240)" "$build/benchmarks/q35_bench_cuda" --benchmark_min_time=0.1 --benchmark_out="$logs/bench.json" \
  --benchmark_out_format=json >"$logs/bench.log" 2>&1
bench_rc=$?

echo
echo "== summary ($gpu) =="
echo "build: ${build_s}s   tests: rc=$tests_rc ($(grep -Eo '[0-9]+% tests passed.*' "$logs/tests.log" | head -1))   e2e: rc=$e2e_rc vram: rc=$vram_rc (${e2e_s}s)   host experts = resident: rc=$experts_rc   bench: rc=$bench_rc   total: $((SECONDS - start))s"
tail -1 "$logs/ptxas.txt"
python3 - "$logs/bench.json" <<'PY'
import json, sys
try:
    data = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"no benchmark results: {e}")
    sys.exit(0)
print(f"copy bandwidth reference: see %copy_bw; context: {data.get('context', {}).get('host_name', '')}")
print(f"{'benchmark':60s} {'time_us':>10s} {'GB/s':>9s} {'%copy':>7s} {'TFLOPS':>7s}")
for b in data.get("benchmarks", []):
    if b.get("error_occurred"):
        print(f"{b['name'][:60]:60s} skipped: {b.get('error_message', '')}")
        continue
    t = b.get("real_time", 0.0)
    unit = b.get("time_unit", "ns")
    us = t / 1000.0 if unit == "ns" else t * 1000.0 if unit == "ms" else t
    gbs = b.get("GB/s", 0.0)
    pct = b.get("%copy_bw", 0.0)
    tf = b.get("TFLOPS", 0.0)
    print(f"{b['name'][:60]:60s} {us:10.2f} {gbs:9.1f} {pct:7.1f} {tf:7.1f}")
PY
python3 - "$logs/e2e.json" <<'PY'
import json, sys
try:
    data = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"no end-to-end results: {e}")
    sys.exit(0)
print(f"\nend to end ({data.get('device')}, copy {data.get('copy_gbps')} GB/s, tg{data.get('tg_tokens')}, greedy, decode step as run):")
print(f"{'model':26s} {'pp tok/s':>18s} {'ctx':>6s} {'tg tok/s':>9s} {'GB/tok':>7s} {'%roof':>6s}  step us: eager fwd / as run / gap")
for m in data.get("models", []):
    if "skipped" in m:
        print(f"{m['name'][:26]:26s} skipped: {m['skipped']}")
        continue
    pp = " ".join(f"{p['tokens']}:{p['tok_s']:.0f}" for p in m.get("prefill", []))
    for i, d in enumerate(m.get("decode", [])):
        s = d["step_ms"]
        print(f"{(m['name'] if i == 0 else '')[:26]:26s} {(pp if i == 0 else '')[:18]:>18s} {d['context']:6d} "
              f"{d['tok_s']:9.1f} {d['bytes_per_token'] / 1e9:7.3f} {d['roofline_pct'] or 0:6.1f}  "
              f"{1e3 * s['eager_forward']:.0f} / {1e3 * s['graph_forward']:.0f} / {1e3 * s['eager_minus_graph']:.0f}")
PY
python3 - "$logs/e2e_vram.json" <<'PY'
import json, sys
try:
    data = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"no --vram results: {e}")
    sys.exit(0)
print(f"\nexperts in host memory (zero-copy read {data.get('zero_copy_gbps')} GB/s, copy {data.get('copy_gbps')} GB/s):")
print(f"{'model':26s} {'budget GiB':>10s} {'slots':>9s} {'pp tok/s':>9s} {'tg tok/s':>9s} {'hit %':>6s} {'host MB/tok':>11s} {'%roof':>6s}")
for m in data.get("models", []):
    gib = m.get("vram_budget", 0) / 2**30
    if "skipped" in m:
        print(f"{m['name'][:26]:26s} {gib:10.1f} skipped: {m['skipped'][:200]}")
        continue
    pp = m["prefill"][0]["tok_s"] if m.get("prefill") else 0
    for d in m.get("decode", []):
        print(f"{m['name'][:26]:26s} {gib:10.1f} {m['expert_slots']:4d}/{m['n_experts']:<4d} {pp:9.0f} {d['tok_s']:9.1f} "
              f"{100 * d.get('expert_hit_rate', 1):6.1f} {d.get('host_bytes_per_token', 0) / 1e6:11.1f} {d['roofline_pct'] or 0:6.1f}")
PY
exit $((tests_rc != 0))
