#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build tests and benchmarks for this GPU's architecture, run the
# test suite on the device, run the benchmarks, write logs, and print a short summary table last.
#   scripts/device_check.sh [LOG_DIR]        (default: device_logs/)
# Budget: about 8 minutes on a 16-core machine. Never changes clocks or resets the GPU.
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
if ! timeout 300 cmake --build "$build" -j"$jobs" >"$logs/build.log" 2>&1; then
  tail -40 "$logs/build.log"
  echo "build failed (see $logs/build.log)"
  exit 1
fi
python3 scripts/check_ptxas.py "$logs/build.log" --table >"$logs/ptxas.txt" 2>&1
build_s=$((SECONDS - start))

timeout 150 ctest --test-dir "$build" -R '^cuda\.' --output-on-failure >"$logs/tests.log" 2>&1
tests_rc=$?
test_s=$((SECONDS - start - build_s))

timeout 240 "$build/benchmarks/q35_bench_cuda" --benchmark_min_time=0.1 --benchmark_out="$logs/bench.json" \
  --benchmark_out_format=json >"$logs/bench.log" 2>&1
bench_rc=$?

echo
echo "== summary ($gpu) =="
echo "build: ${build_s}s   tests: rc=$tests_rc ($(grep -Eo '[0-9]+% tests passed.*' "$logs/tests.log" | head -1))   bench: rc=$bench_rc"
tail -1 "$logs/ptxas.txt"
python3 - "$logs/bench.json" <<'PY'
import json, sys
try:
    data = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"no benchmark results: {e}")
    sys.exit(0)
print(f"copy bandwidth reference: see %copy_bw; context: {data.get('context', {}).get('host_name', '')}")
print(f"{'benchmark':60s} {'time_us':>10s} {'GB/s':>9s} {'%copy':>7s}")
for b in data.get("benchmarks", []):
    if b.get("error_occurred"):
        print(f"{b['name'][:60]:60s} skipped: {b.get('error_message', '')}")
        continue
    t = b.get("real_time", 0.0)
    unit = b.get("time_unit", "ns")
    us = t / 1000.0 if unit == "ns" else t * 1000.0 if unit == "ms" else t
    gbs = b.get("GB/s", 0.0)
    pct = b.get("%copy_bw", 0.0)
    print(f"{b['name'][:60]:60s} {us:10.2f} {gbs:9.1f} {pct:7.1f}")
PY
exit $((tests_rc != 0))
