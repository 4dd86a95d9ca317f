#!/usr/bin/env bash
# Configures and builds on the GPU machine (no network: header dependencies come from .deps/, see
# scripts/carry-deps.sh). Usage: scripts/device-build.sh [build-dir] [cuda-archs]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
archs=${2:-90a}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$archs" \
  -DCMAKE_PREFIX_PATH="$PWD/.deps" >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
ninja -C "$build" -j "$(nproc)"
