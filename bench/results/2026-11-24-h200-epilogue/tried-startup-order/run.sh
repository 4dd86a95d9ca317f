#!/bin/bash
# Wide tile: the CTA's second block's copies wait for the first block's (start-up ordering).
OUT=${OUT:-/tmp/out}; R=$OUT/first; mkdir -p $R/grid
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > $R/device.txt
for c in "128 1 64 1024 sm90:2" "128 1 64 1024 sm90:0" "128 1 8 4096 sm90:2"; do
  read -r h sq b len bk <<<"$c"
  tag=h$h-s$sq-b$b-L$len-${bk/:/_}
  timeout 120 .bin/mlakit-trace bench --heads $h --s-q $sq --batch $b --seq-len $len --pdl --backend $bk --no-verify > $R/grid/$tag.log 2>&1
  python3 .bin/grid_timeline.py $R/grid/$tag.log > $R/grid/$tag.summary
  gzip $R/grid/$tag.log
done
run() { # bin tag args...
  local b=$1 tag=$2; shift 2
  echo "## $b $*" >> $R/ab-$tag.txt
  timeout 120 .bin/$b bench --pdl --no-verify --settle-ms 300 "$@" 2>&1 | grep -v "^device\|^backend" >> $R/ab-$tag.txt
}
for rep in 1 2; do
  for b in mlakit-base2 mlakit-new; do
    run $b b64L1k --heads 128 --batch 64 --seq-len 1024 --backend sm90:0,sm90:2
    run $b b128L1k --heads 128 --batch 128 --seq-len 1024 --backend sm90:0,sm90:2
    run $b b32L1k --heads 128 --batch 32 --seq-len 1024 --backend sm90:2
    run $b b8L4k --heads 128 --batch 8 --seq-len 4096 --backend sm90:2
    run $b b1L4k --heads 128 --batch 1 --seq-len 4096 --backend sm90:2
    run $b b64L4k --heads 128 --batch 64 --seq-len 4096 --backend sm90:0
    run $b h64b64 --heads 64 --batch 64 --seq-len 1024 --backend sm90:2
  done
done
tar czf $OUT/first.tgz -C $OUT first
for f in $R/grid/*.summary; do echo "== $f"; grep -E "span|setup -> first|main loop" $f; done
for f in $R/ab-*.txt; do echo "== $f"; cat $f; done | grep -v "^$" | grep -E "^##|^ *sm90" | cut -c1-80
