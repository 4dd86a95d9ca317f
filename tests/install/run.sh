#!/usr/bin/env bash
# Installs the build to a temporary prefix and builds two consumers against it: a CMake project
# (find_package(mlakit), the static and the shared library) and a C program compiled with
# pkg-config's flags (the C API); runs each. A CTest test (tests/CMakeLists.txt).
# Usage: tests/install/run.sh <build dir> <cmake>
set -euo pipefail
build=$1
cmake=${2:-cmake}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$cmake" --install "$build" --prefix "$tmp/prefix" >/dev/null
"$cmake" -S "$here/consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; exit 1; }
"$cmake" --build "$tmp/consumer" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
"$tmp/consumer/consumer"
"$tmp/consumer/consumer_shared"

pc_dir=$(dirname "$(find "$tmp/prefix" -name mlakit.pc)")
flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs mlakit)
cc -std=c11 -Wall -Werror "$here/consumer/consumer_c.c" $flags -lm -o "$tmp/consumer_c"
LD_LIBRARY_PATH="$(dirname "$pc_dir")" "$tmp/consumer_c"
test -f "$tmp/prefix/share/doc/mlakit/LICENSE"
