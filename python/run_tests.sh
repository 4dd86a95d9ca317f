#!/usr/bin/env bash
# Builds and installs the mlakit Python package into a virtual environment, then runs its tests.
# CPU tests (NumPy) always run; GPU tests (marker gpu) skip themselves without PyTorch and a GPU.
#
# Usage: python/run_tests.sh [--offline] [pytest arguments...]
#   --offline  a machine without network access (the GPU machine): the environment sees the
#              system's packages (nanobind, scikit-build-core, torch, pytest, numpy) and builds
#              with --no-build-isolation against them.
# Environment:
#   MLAKIT_CUDA_ARCHITECTURES  CUDA architectures to build (default 80: one, to keep CI short;
#                              90a on an H100/H200)
#   MLAKIT_CUDA                ON, OFF or AUTO (default: AUTO, the GPU backends when nvcc is
#                              found); OFF builds the cpu backend alone, in a minute
#   MLAKIT_VENV                the virtual environment (default python/.venv); "system": no
#                              environment, install into the python3 on PATH
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '[python] %s\n' "$*" >&2; }

offline=0
if [ "${1:-}" = "--offline" ]; then
  offline=1
  shift
fi
archs=${MLAKIT_CUDA_ARCHITECTURES:-80}
venv=${MLAKIT_VENV:-python/.venv}
case $venv in /* | system) ;; *) venv="$PWD/$venv" ;; esac

# --- system packages the C++ build needs (Debian/Ubuntu), unless a carried .deps/ has them ----
need_pkgs=()
for pkg in g++ python3-venv; do dpkg -s "$pkg" >/dev/null 2>&1 || need_pkgs+=("$pkg"); done
if [ ! -f .deps/include/nlohmann/json.hpp ] && ! dpkg -s nlohmann-json3-dev >/dev/null 2>&1; then
  need_pkgs+=(nlohmann-json3-dev)
fi
if ((${#need_pkgs[@]})) && [ "$offline" = 0 ] && command -v apt-get >/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "installing ${need_pkgs[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
if ! command -v nvcc >/dev/null; then
  for dir in /usr/local/cuda/bin /opt/cuda/bin; do [ -x "$dir/nvcc" ] && export PATH="$dir:$PATH"; done
fi
cuda=${MLAKIT_CUDA:-AUTO}
if [ "$cuda" != OFF ] && ! command -v nvcc >/dev/null; then
  [ "$cuda" = ON ] && { log "nvcc not found: install the CUDA toolkit (12.8 or newer)"; exit 1; }
  log "nvcc not found: building the cpu backend only (the GPU tests skip)"
fi

# --- the virtual environment and the package ----------------------------------------------------
if [ "$venv" = system ]; then
  py=$(command -v python3)
else
  if [ ! -x "$venv/bin/python" ]; then
    log "creating $venv"
    if [ "$offline" = 1 ]; then
      python3 -m venv --system-site-packages "$venv"
    else
      python3 -m venv "$venv"
    fi
  fi
  py="$venv/bin/python"
fi
build_args=(-C "cmake.define.CMAKE_CUDA_ARCHITECTURES=$archs" -C "cmake.define.MLAKIT_CUDA=$cuda")
start=$SECONDS
if [ "$offline" = 1 ]; then
  log "building (offline, --no-build-isolation) for CUDA architectures $archs (MLAKIT_CUDA $cuda)"
  "$py" -m pip install --no-build-isolation --no-deps "${build_args[@]}" ./python
else
  log "building for CUDA architectures $archs (MLAKIT_CUDA $cuda)"
  "$py" -m pip install -q --upgrade pip
  "$py" -m pip install "${build_args[@]}" "./python[test]"
fi
log "installed in $((SECONDS - start)) s"

# --- tests (pytest's exit code 5, no tests collected, fails too) --------------------------------
# From outside python/, so that `import mlakit` finds the installed package, not the sources.
cd python/tests
exec "$py" -m pytest -c ../pyproject.toml --rootdir .. -q "$@"
