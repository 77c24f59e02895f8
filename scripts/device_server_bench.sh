#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: issue 21's serving numbers. Builds qwen35_server_cuda for this GPU,
# serves a synthetic full-size model (qwen35_server --bench-model: random Q4_K_M weights built on the
# device, the bundled tiny model's tokenizer and chat template; no model file needed), and drives it
# with scripts/bench_server.py: D (aggregate decode tok/s at 32 sequences over one at a time), P (a
# ~2k-token system prompt reused: TTFT against a cold one), A (short questions, 64 in flight); then D
# once more with --batch-invariant-gemm and once with --no-batch-invariant.
#   scripts/device_server_bench.sh [LOG_DIR] [MODEL]     (defaults: device_logs/, 9B)
# Needs Python's openai package on the device machine (carried as wheels: scripts/device_prep.sh, then
# `source scripts/device_env.sh`; scripts/device_check.sh runs this as its server stage). Budget: under
# 10 minutes on a 16-core machine (build ~4 min, model build seconds, the scenarios ~4 min).
# Never changes clocks or resets the GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
logs=${1:-device_logs}
model=${2:-9B}
mkdir -p "$logs"
if ! python3 -c "import openai" 2>/dev/null; then
  echo "python3 cannot import openai: carry its wheels (docs/server.md, 'Load benchmark')"
  exit 1
fi
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
build=build-device-e2e
cmake -B "$build" -DQ35_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cap" -DQ35_BUILD_EXAMPLES=ON \
  -DQ35_BUILD_TESTS=OFF -DQ35_BUILD_BENCHMARKS=OFF >"$logs/server_configure.log" 2>&1
if ! timeout 300 cmake --build "$build" -j"$(nproc)" --target qwen35_server_cuda >"$logs/server_build.log" 2>&1; then
  tail -30 "$logs/server_build.log"
  echo "qwen35_server_cuda build failed (see $logs/server_build.log)"
  exit 1
fi

# serve LABEL BENCH_ARGS SERVER_FLAGS...: 64 sequences, a 64K-token KV pool shared by all, 2048 prompt
# tokens per step; bench_server.py's scenarios against it, JSON to $logs/LABEL.json
serve() {
  local label=$1 bench_args=$2
  shift 2
  "$build/examples/qwen35_server/qwen35_server_cuda" --bench-model "$model" -m tests/data/tiny_dense_q4km.gguf \
    --port 0 -np 64 -c 65536 -b 2048 "$@" >"$logs/$label.log" 2>&1 &
  pid=$!
  local port=
  for _ in $(seq 240); do
    port=$(grep -o 'listening on http://127\.0\.0\.1:[0-9]*' "$logs/$label.log" | grep -o '[0-9]*$')
    [[ -n $port ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if [[ -z $port ]]; then
    tail -20 "$logs/$label.log"
    echo "the server ($label) did not start (see $logs/$label.log)"
    kill "$pid" 2>/dev/null
    return 1
  fi
  head -3 "$logs/$label.log"
  # shellcheck disable=SC2086  # bench_args: several words
  PYTHONUNBUFFERED=1 timeout 300 python3 scripts/bench_server.py --base-url "http://127.0.0.1:$port/v1" \
    $bench_args --json "$logs/$label.json" 2>&1 | tee "$logs/$label.txt"
  local bench_rc=${PIPESTATUS[0]}
  python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())" \
    "http://127.0.0.1:$port/metrics" >"$logs/${label}_metrics.txt" 2>&1
  kill -TERM "$pid" 2>/dev/null
  wait "$pid"
  echo "server bench ($label): rc=$bench_rc (scenario lines above; JSON $logs/$label.json)"
  return "$bench_rc"
}
pid=
# the server goes with this script, also when a caller's timeout stops it
trap '[[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null' EXIT
# The server's default: batch invariant (decode groups of <= 8 rows, each reading the weights).
serve server_bench "--scenarios DPA --requests-a 256"
rc=$?
# D again without batch invariance: 32 decoding rows in one group (the tensor-core GEMM reads the
# weights once per step), the fastest aggregate the server offers.
# D with batch invariance on the GEMM: 32 decoding rows in one group, each row as it would be alone.
serve server_bench_gemm "--scenarios D" --batch-invariant-gemm || rc=1
serve server_bench_fast "--scenarios D" --no-batch-invariant || rc=1
exit "$rc"
