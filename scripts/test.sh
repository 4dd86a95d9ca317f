#!/usr/bin/env bash
# Builds (scripts/setup.sh) and runs every test. GPU tests (label gpu) skip themselves when no GPU
# is present; run `ctest --test-dir build -L gpu` on a GPU machine for those alone.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
