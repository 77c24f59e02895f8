#!/usr/bin/env bash
# Installs what q35 needs to build and test on Debian/Ubuntu (run as root or with sudo).
# The CUDA toolkit (nvcc, CCCL) is optional and not installed here: without it only the sim backend builds.
set -euo pipefail
pkgs=(cmake ninja-build g++ make python3 pkg-config doctest-dev libboost-context-dev libpcre2-dev libbenchmark-dev
      clang clang-format libclang-rt-14-dev nlohmann-json3-dev libcpp-httplib-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
# The server's end-to-end test drives it with OpenAI's official Python client.
if ! python3 -c "import openai" >/dev/null 2>&1; then
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore openai ||
    python3 -m pip install --quiet --disable-pip-version-check --break-system-packages openai
fi
