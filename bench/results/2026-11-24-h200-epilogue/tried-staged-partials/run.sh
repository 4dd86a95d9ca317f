#!/bin/bash
# Wide tile, cluster schedule with several clusters of one CTA: fp32 partials staged through
# shared memory and copied out as whole rows. Timelines, A/B base2 (HEAD) vs new, checks, tests.
OUT=${OUT:-/tmp/out}; R=$OUT/stage; mkdir -p $R/grid
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > $R/device.txt
for c in "128 1 1 4096 sm90:2" "128 1 8 4096 sm90:2"; do
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
    run $b b1 --heads 128 --batch 1 --seq-len 1024,4096,8192,32768 --backend sm90:2
    run $b b8 --heads 128 --batch 8 --seq-len 1024,4096,8192 --backend sm90:2
    run $b b32 --heads 128 --batch 32 --seq-len 4096,8192 --backend sm90:2
    run $b h64 --heads 64 --batch 1,8 --seq-len 4096 --backend sm90:2
    run $b s2 --heads 128 --s-q 2 --batch 8 --seq-len 4096 --backend sm90:2
  done
done
timeout 120 .bin/mlakit-new bench --pdl --heads 128,64 --batch 1,8 --seq-len 1024,4096 --backend sm90:2 > $R/verified.txt 2>&1
timeout 60 .bin/mlakit-new bench --pdl --heads 128 --s-q 2 --batch 8 --seq-len 4096 --var 1 --lse --sinks --backend sm90:2 >> $R/verified.txt 2>&1
timeout 300 stdbuf -oL .bin/mlakit_gpu_tests > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?" >> $R/gpu-tests.txt
tar czf $OUT/stage.tgz -C $OUT stage
for f in $R/grid/*.summary; do echo "== $f"; grep -E "span|main loop|last block ->|barrier ->|row factors \(" $f; done
for f in $R/ab-*.txt; do echo "== $f"; cat $f; done | grep -v "^$" | grep -E "^##|^ *sm90" | cut -c1-80
grep -E "^sm90" $R/verified.txt | awk '{print $1,$2,$3,$4,$5,$6,$8,$(NF-1),$NF}'
grep -E "FAILED|PASSED" $R/gpu-tests.txt | head; tail -1 $R/gpu-tests.txt
