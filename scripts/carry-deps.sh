#!/usr/bin/env bash
# Copies the header-only dependencies into .deps/ (git-ignored) so that a machine without network
# access (the GPU machine) can build with -DCMAKE_PREFIX_PATH=$PWD/.deps.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/include
cp -r /usr/include/nlohmann /usr/include/CLI .deps/include/
echo "headers copied to .deps/include"
