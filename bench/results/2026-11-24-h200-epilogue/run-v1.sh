#!/bin/bash
# Epilogue change (quad-transposed 16-byte stores): grid timeline (trace build), A/B base vs new
# interleaved and settled, then the GPU tests of the new build.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT/grid
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > $OUT/device.txt
for c in "128 1 64 1024 sm90:2" "128 1 128 1024 sm90:0" "128 1 8 4096 sm90:2" "128 1 1 4096 sm90:2"; do
  read -r h sq b len bk <<<"$c"
  tag=h$h-s$sq-b$b-L$len-${bk/:/_}
  timeout 120 .bin/mlakit-trace bench --heads $h --s-q $sq --batch $b --seq-len $len --pdl --backend $bk --no-verify > $OUT/grid/$tag.log 2>&1
  grep -v "^G \|^T " $OUT/grid/$tag.log > $OUT/grid/$tag.txt
  python3 .bin/grid_timeline.py $OUT/grid/$tag.log > $OUT/grid/$tag.summary
  rm $OUT/grid/$tag.log
done
run() { # bin tag args...
  local b=$1 tag=$2; shift 2
  echo "## $b $*" >> $OUT/ab-$tag.txt
  timeout 120 .bin/$b bench --pdl --no-verify --settle-ms 300 "$@" 2>&1 | grep -v "^device\|^backend" >> $OUT/ab-$tag.txt
}
for rep in 1 2; do
  for b in mlakit-base mlakit-new; do
    run $b b64L1k --heads 128 --batch 64 --seq-len 1024 --backend sm90:0,sm90:2
    run $b b128L1k --heads 128 --batch 128 --seq-len 1024 --backend sm90:0,sm90:2
    run $b b64L4k --heads 128 --batch 64 --seq-len 4096 --backend sm90:0,sm90:2
    run $b b8L4k --heads 128 --batch 8 --seq-len 4096 --backend sm90:0,sm90:2
    run $b b1L4k --heads 128 --batch 1 --seq-len 4096 --backend sm90:0,sm90:2
    run $b h16 --heads 16 --batch 32 --seq-len 4096 --backend sm90:3,sm90:5
  done
done
timeout 300 stdbuf -oL .bin/mlakit_gpu_tests > $OUT/gpu-tests.txt 2>&1; echo "gpu tests rc $?" >> $OUT/gpu-tests.txt
for f in $OUT/grid/*.summary; do echo "== $f"; grep -E "span|last block|barrier|stores|first data ->" $f; done
for f in $OUT/ab-*.txt; do echo "== $f"; cat $f; done | grep -v "^$" | grep -E "^##|^ *sm90" | cut -c1-80
tail -3 $OUT/gpu-tests.txt
