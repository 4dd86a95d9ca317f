#!/usr/bin/env bash
# Installs what mlakit needs to build (when missing), configures and builds it in build/.
# With the CUDA toolkit (nvcc) it builds the GPU backends too (a GPU is not needed to build);
# without it, the cpu backend alone (MLAKIT_CUDA=AUTO; pass -DMLAKIT_CUDA=ON to require CUDA).
# Usage: scripts/setup.sh [extra cmake arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }

# --- system packages (Debian/Ubuntu), for what is not already there ----------------------------
# A header found in the system include paths or in a carried .deps/ (scripts/carry-deps.sh)
# counts as installed.
have_header() {
  for dir in /usr/include /usr/local/include "$PWD/.deps/include"; do
    [ -f "$dir/$1" ] && return 0
  done
  return 1
}
need_pkgs=()
command -v ninja >/dev/null || need_pkgs+=(ninja-build)
command -v g++ >/dev/null || need_pkgs+=(g++)
have_header gtest/gtest.h || need_pkgs+=(libgtest-dev)
have_header nlohmann/json.hpp || need_pkgs+=(nlohmann-json3-dev)
have_header CLI/CLI.hpp || need_pkgs+=(libcli11-dev)
if ((${#need_pkgs[@]})); then
  if ! command -v apt-get >/dev/null; then
    log "missing packages ${need_pkgs[*]} and no apt-get: install them by hand"; exit 1
  fi
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "installing ${need_pkgs[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# --- CMake 3.28 or newer (older ones do not know nvcc 13's C++20 switch) -------------------------
cmake_ok() {
  command -v cmake >/dev/null &&
    python3 -c "import sys; v=tuple(map(int, sys.argv[1].split('.')[:2])); sys.exit(v < (3, 28))" \
      "$(cmake --version | head -1 | awk '{print $3}')"
}
if ! cmake_ok; then
  log "installing cmake>=3.28 from PyPI"
  python3 -m pip install -q "cmake>=3.28,<4" 2>/dev/null || python3 -m pip install -q --user "cmake>=3.28,<4"
  hash -r
  export PATH="$HOME/.local/bin:$PATH"
  cmake_ok || { log "cmake 3.28+ still not found on PATH"; exit 1; }
fi

# --- CUDA toolkit ------------------------------------------------------------------------------
if ! command -v nvcc >/dev/null; then
  for dir in /usr/local/cuda/bin /opt/cuda/bin; do [ -x "$dir/nvcc" ] && export PATH="$dir:$PATH"; done
fi
command -v nvcc >/dev/null ||
  log "nvcc not found: building the cpu backend only (install the CUDA toolkit 12.8+ for the GPU ones)"

# --- configure and build -------------------------------------------------------------------------
prefix=(); [ -d .deps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.deps")
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${prefix[@]}" "$@" >build.configure.log 2>&1 ||
  { cat build.configure.log; exit 1; }
cmake --build build
log "built build/mlakit and the tests"
