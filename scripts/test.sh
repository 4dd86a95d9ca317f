#!/usr/bin/env bash
# Builds (scripts/setup.sh) and runs every test: the C++ tests (ctest) and the Python package's
# tests (python/run_tests.sh). GPU tests (ctest label gpu, pytest marker gpu) skip themselves when
# no GPU is present; on a GPU machine run `ctest --test-dir build -L gpu` for those alone.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
python/run_tests.sh
