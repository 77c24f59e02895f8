#!/usr/bin/env bash
# The main job on the bundled tiny model, through the sim backend: scripts/run_example.sh [BUILD_DIR]
# It describes the model, then generates text from a raw prompt (timings on stderr).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
exe="$build/examples/qwen35_generate/qwen35_generate"
if [[ ! -x "$exe" ]]; then
  cmake -B "$build" -DQ35_ENABLE_CUDA=OFF >/dev/null
  cmake --build "$build" -j2 --target qwen35_generate
fi
model=tests/data/tiny_dense_q4km.gguf
"$exe" -m "$model" --info
echo
"$exe" -m "$model" -p "The quick brown fox" -n 48 --temp 0.7 --seed 42
echo
