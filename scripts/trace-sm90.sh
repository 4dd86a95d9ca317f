#!/usr/bin/env bash
# A timeline of one sm90 decode CTA (CTA 0): builds the library with MLAKIT_SM90_TRACE into
# build-trace/ (clock64 stamps per block for each consumer warpgroup, the producer's issues and a
# watcher warp's "landed" times; src/backends/sm90/trace.cuh), runs mlakit bench on each
# case and summarizes the stamps (scripts/trace_sm90.py), then the grid timeline of the same
# launch (%globaltimer at 7 points of every CTA; scripts/grid_timeline.py). The tracing adds ~10%
# to the time.
# Usage on the GPU machine (.deps carried): scripts/trace-sm90.sh OUTDIR [CASE ...]
# A case is "h_q s_q batch seq_len backend", e.g. "128 1 128 8192 sm90:0" (the default set below).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/trace-sm90.sh OUTDIR [CASE ...]}
shift
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B build-trace -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_PREFIX_PATH="$PWD/.deps" -DCMAKE_CUDA_FLAGS=-DMLAKIT_SM90_TRACE >"$out/configure.log" 2>&1 ||
  { tail "$out/configure.log"; exit 1; }
ninja -C build-trace mlakit >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
[ $# -gt 0 ] || set -- "128 1 128 8192 sm90:0" "16 1 128 8192 sm90:0" "128 1 8 4096 sm90:2"
for c in "$@"; do
  read -r h sq b len bk <<<"$c"
  tag=h$h-s$sq-b$b-L$len-${bk/:/_}
  build-trace/mlakit bench --heads "$h" --s-q "$sq" --batch "$b" --seq-len "$len" --pdl \
    --backend "$bk" --no-verify >"$out/$tag.log" 2>&1
  echo "== $tag: $(grep -E '^sm' "$out/$tag.log" | head -1)"
  python3 scripts/trace_sm90.py "$out/$tag.log"
  python3 scripts/grid_timeline.py "$out/$tag.log"
done
