#!/usr/bin/env bash
# Readies this checkout for the device tool's lent GPU machine, and undoes it. That machine has the CUDA
# toolkit, CMake and Python, but none of the other libraries q35 builds against, no network, and it
# receives the working tree only up to 64 MiB (tracked files and untracked ones git does not ignore,
# plus the paths a call carries); this checkout holds ~86 MB.
#
#   scripts/device_prep.sh on      (here, before the device calls)
#     - downloads the Debian packages of q35's build dependencies into .device/debs (apt-get download:
#       doctest, Boost.Context, PCRE2, Google Benchmark, nlohmann-json, cpp-httplib and its headers'
#       dependencies, pkgconf) and the wheels of the openai client and its dependencies (for
#       scripts/bench_server.py) into .device/whl; .device/ is ignored (.git/info/exclude) and travels only
#       when a call carries it;
#     - takes the two float32 fixtures (tests/data/tiny_moe.gguf, tiny_dense.gguf: 54 MB, read only by
#       host tests that do not run there) out of the index and ignores them, so they do not travel
#       (the files stay on disk);
#     - prints the bytes that will travel;
#     - installs a pre-commit hook that refuses every commit until `off` (a commit would delete them).
#   scripts/device_prep.sh off     (here, after the device calls, and before any commit)
#     puts the fixtures back into the index, stops ignoring them and removes the hook.
#   scripts/device_prep.sh status
#
# There, every call starts with `source scripts/device_env.sh` (scripts/device_check.sh does): it unpacks
# the packages into /tmp/q35deps and the wheels into /tmp/q35site and points CMake, pkg-config, the
# linker and Python at them. The call: run(command="bash scripts/device_check.sh", carry=[".device"]).
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=.git/info/exclude
slim=(tests/data/tiny_moe.gguf tests/data/tiny_dense.gguf)
marker="# device_prep.sh: left out of the device tool's tree"
hook=$(git rev-parse --git-path hooks)/pre-commit
hook_tag="# written by scripts/device_prep.sh on"
debs=(doctest-dev libboost1.74-dev libboost-context1.74-dev libboost-context1.74.0 libpcre2-dev libpcre2-8-0
      libbenchmark-dev libbenchmark1debian nlohmann-json3-dev libcpp-httplib-dev libcpp-httplib0.11 libssl-dev
      zlib1g-dev libbrotli-dev libbrotli1 pkgconf pkgconf-bin libpkgconf3)

travelling_bytes() {
  { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 -r du -cb 2>/dev/null | tail -1 |
    cut -f1
}

case "${1:-status}" in
on)
  grep -qxF "/.device/" "$exclude" || echo "/.device/" >>"$exclude"
  mkdir -p .device/debs .device/whl
  # a package that did not download stops here (the device build would fail on it much later)
  if ! (cd .device/debs && apt-get download -q "${debs[@]}" >download.log 2>&1); then
    grep -v '^W: Download is performed unsandboxed' .device/debs/download.log >&2
    echo "device_prep.sh: apt-get download failed for one of: ${debs[*]}" >&2
    exit 1
  fi
  rm -f .device/debs/download.log
  # Python 3.12 on x86-64 there (KINDS.md); pip matches each manylinux tag exactly
  # with every dependency (~6 MB): the image's own httpx/anyio/typing-extensions may be older than the
  # client needs, and PYTHONPATH puts these first
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .device/whl openai
  # first (while they are out of the index a commit would delete them: a pre-commit hook refuses it)
  mkdir -p "$(dirname "$hook")"
  if [[ -e $hook ]] && ! grep -qxF "$hook_tag" "$hook"; then
    echo "device_prep.sh: $hook exists and is not ours: not touching the index" >&2
    exit 1
  fi
  printf '%s\n' '#!/bin/sh' "$hook_tag" \
    'echo "pre-commit: scripts/device_prep.sh is on (float32 fixtures out of the index): run scripts/device_prep.sh off first" >&2' \
    'exit 1' >"$hook"
  chmod +x "$hook"
  for f in "${slim[@]}"; do
    grep -qxF "/$f" "$exclude" || printf '%s\n/%s\n' "$marker" "$f" >>"$exclude"
    git ls-files --error-unmatch "$f" >/dev/null 2>&1 && git rm -q --cached "$f"
  done
  echo "left out: ${slim[*]} (run 'scripts/device_prep.sh off' before committing)"
  echo "travels: $(travelling_bytes) bytes of the tree + $(du -sb .device | cut -f1) bytes of .device (limit 67108864)"
  ;;
off)
  for f in "${slim[@]}"; do
    sed -i "\\|^$marker\$|d; \\|^/$f\$|d" "$exclude"
    git reset -q -- "$f"
  done
  grep -qxF "$hook_tag" "$hook" 2>/dev/null && rm -f "$hook"
  git status --short -- "${slim[@]}"
  echo "fixtures back in the index"
  ;;
status)
  for f in "${slim[@]}"; do
    if git ls-files --error-unmatch "$f" >/dev/null 2>&1; then echo "$f: tracked"; else echo "$f: left out (prep on)"; fi
  done
  echo "travels: $(travelling_bytes) bytes of the tree$([[ -d .device ]] && echo " + $(du -sb .device | cut -f1) bytes of .device if carried")"
  ;;
*)
  echo "usage: scripts/device_prep.sh on|off|status" >&2
  exit 2
  ;;
esac
