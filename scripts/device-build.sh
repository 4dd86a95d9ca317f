#!/usr/bin/env bash
# Configures and builds on the GPU machine (no network: header dependencies come from .deps/, see
# scripts/carry-deps.sh). Usage: scripts/device-build.sh [build-dir] [cuda-archs]
# NCCL (the library mlakit_nccl, `mlakit bench --cp N`, tests/gpu/cp_nccl_test.cc) is found by
# CMake in the CUDA toolkit, the system paths or python3's nvidia-nccl wheel (PyTorch's:
# site-packages/nvidia/nccl); MLAKIT_NCCL_ROOT=<dir with include/nccl.h and lib/libnccl.so*>
# points to another, MLAKIT_NCCL=ON requires it, OFF leaves it out.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
archs=${2:-90a}
nccl=(-DMLAKIT_NCCL="${MLAKIT_NCCL:-AUTO}")
[ -n "${MLAKIT_NCCL_ROOT:-}" ] && nccl+=(-DMLAKIT_NCCL_ROOT="$MLAKIT_NCCL_ROOT")
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$archs" \
  -DCMAKE_PREFIX_PATH="$PWD/.deps" "${nccl[@]}" >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
grep -E "mlakit: (NCCL|.*NCCL merges)" "$build.configure.log" || true
ninja -C "$build" -j "$(nproc)"
