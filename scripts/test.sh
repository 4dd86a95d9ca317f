#!/usr/bin/env bash
# Builds (scripts/setup.sh) and runs every test: the C++ tests (ctest) and the Python package's
# tests (python/run_tests.sh). GPU tests (ctest label gpu, pytest marker gpu) skip themselves when
# no GPU is present; on a GPU machine run `ctest --test-dir build -L gpu` for those alone.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
# Without a GPU the package's CUDA kernels would only be compiled, never run: build it without
# CUDA (the cpu backend alone, what a machine without nvcc builds), which keeps that build tested
# and CI short. MLAKIT_CUDA, when set, decides.
if [ -z "${MLAKIT_CUDA:-}" ] && ! nvidia-smi -L >/dev/null 2>&1; then export MLAKIT_CUDA=OFF; fi
python/run_tests.sh
