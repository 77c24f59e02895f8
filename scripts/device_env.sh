# shellcheck shell=bash
# Sourced on the device tool's GPU machine (scripts/device_check.sh does): unpacks what
# scripts/device_prep.sh put into .device/ and points the build and Python at it. Without .device/
# (a machine that has the packages installed) it changes nothing.
#   source scripts/device_env.sh
# Debian packages go to /tmp/q35deps (dpkg-deb -x; never into /), wheels to /tmp/q35site.
q35_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if compgen -G "$q35_root/.device/debs/*.deb" >/dev/null; then
  q35deps=/tmp/q35deps
  if [[ ! -f $q35deps/.unpacked ]]; then
    mkdir -p "$q35deps"
    for f in "$q35_root"/.device/debs/*.deb; do
      if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$f" "$q35deps"
      else  # a .deb is an ar archive holding data.tar.*
        (t=$(mktemp -d) && cd "$t" && ar x "$f" && tar -xf data.tar.* -C "$q35deps" && rm -rf "$t")
      fi
    done
    touch "$q35deps/.unpacked"
  fi
  lib=$q35deps/usr/lib/x86_64-linux-gnu
  # find_package(... CONFIG) and find_library/find_path search the prefix first
  export CMAKE_PREFIX_PATH=$q35deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  # pkg-config: the carried pkgconf, reading only the carried .pc files, their /usr paths moved under the prefix
  if ! command -v pkg-config >/dev/null; then
    export PKG_CONFIG=$q35deps/usr/bin/pkgconf
  fi
  export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$q35deps/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$q35deps
  # the carried shared libraries (Boost.Context, benchmark, cpp-httplib, brotli, pkgconf's own) at link and
  # run time
  # the headers, for the compilers and nvcc's host compiler: some packages' CMake files name /usr/include
  # itself (Debian's doctestTargets.cmake), and the multiarch directory (openssl/opensslconf.h) is searched
  # only under /usr
  export CPATH=$q35deps/usr/include:$q35deps/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}
  export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
  echo "device_env: build dependencies from .device/debs in $q35deps"
fi
if compgen -G "$q35_root/.device/whl/*.whl" >/dev/null; then
  if [[ ! -f /tmp/q35site/.installed ]] &&
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/q35site \
      "$q35_root"/.device/whl/*.whl; then
    touch /tmp/q35site/.installed
  fi
  if [[ -f /tmp/q35site/.installed ]]; then
    export PYTHONPATH=/tmp/q35site${PYTHONPATH:+:$PYTHONPATH}
    echo "device_env: Python packages from .device/whl in /tmp/q35site"
  else
    echo "device_env: installing the wheels of .device/whl failed (python3 is $(python3 --version 2>&1))"
  fi
fi
