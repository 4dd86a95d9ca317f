#!/bin/bash
# Narrow tile producer warp polling its barriers with mbarrier.test_wait (new) against try_wait (base): A/B interleaved,
# each twice, settled; then checks of new (verified bench rows, Sm90 GPU tests, sanitizers).
OUT=${OUT:-/tmp/out}; R=$OUT/r4; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > $R/device.txt
run() { # bin tag args...
  local b=$1 tag=$2; shift 2
  echo "## $b $*" >> $R/ab-$tag.txt
  timeout 120 .bin/$b bench --pdl --no-verify --settle-ms 300 "$@" 2>&1 | grep -v "^device\|^backend" >> $R/ab-$tag.txt
}
for rep in 1 2; do
  for b in mlakit-base mlakit-new; do
    run $b h16s1b128 --heads 16 --batch 128 --seq-len 8192 --backend sm90:5,sm90:3
    run $b h16s2b128 --heads 16 --s-q 2 --batch 128 --seq-len 8192 --backend sm90:5,sm90:3
    run $b h16s2b32 --heads 16 --s-q 2 --batch 32 --seq-len 4096 --backend sm90:5
    run $b h16s1b32 --heads 16 --batch 32 --seq-len 4096 --backend sm90:5
    run $b h32s1b64 --heads 32 --batch 64 --seq-len 8192 --backend sm90:5
    run $b h16s1b1 --heads 16 --batch 1 --seq-len 8192 --backend sm90:5
    run $b h16s1b64 --heads 16 --batch 64 --seq-len 4096 --backend sm90:5,sm90:3
    run $b h128b8 --heads 128 --batch 8 --seq-len 4096 --backend sm90:2
    run $b h128b64 --heads 128 --batch 64 --seq-len 4096 --backend sm90:2
    run $b h64b32 --heads 64 --batch 32 --seq-len 8192 --backend sm90:2
  done
done
timeout 120 .bin/mlakit-new bench --pdl --heads 16,32 --s-q 1,2 --batch 1,8,64 --seq-len 1024,8192 --var 0,1 --backend sm90:3,sm90:4,sm90:5 > $R/verified.txt 2>&1
echo "verified rc $? ok $(grep -c ' ok ' $R/verified.txt) of $(grep -c '^sm90' $R/verified.txt)" >> $R/verified.txt
for c in "16 1 128 8192 sm90:5" "16 2 128 8192 sm90:5" "16 1 32 4096 sm90:5"; do
  read -r h sq b len bk <<<"$c"
  tag=h$h-s$sq-b$b-L$len-${bk/:/_}
  timeout 60 .bin/mlakit-trace bench --heads $h --s-q $sq --batch $b --seq-len $len --pdl --backend $bk --no-verify > $R/trace-$tag.log 2>&1
  python3 .bin/trace_sm90.py $R/trace-$tag.log > $R/trace-$tag.txt; python3 .bin/grid_timeline.py $R/trace-$tag.log > $R/grid-$tag.txt; gzip $R/trace-$tag.log
done
T=.bin/mlakit_gpu_tests-new
timeout 200 $T --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?" >> $R/gpu-tests.txt
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 3 $T --gtest_filter='Sm90Sanitize.*' --gtest_brief=1 > $R/san-$tool.txt 2>&1
  echo "$tool exit $?" >> $R/san-$tool.txt
done
tar czf $OUT/r4.tgz -C $OUT r4
for f in $R/ab-*.txt; do cat $f; done | grep -E "^##|^ *sm9" | awk '{ if ($1=="##") printf "%s ", $2; else print $1, $2, $3, $4, $5, $8 }'
for f in $R/trace-*.txt; do echo "== $f"; cat $f; done; grep -h "main loop  " $R/grid-*.txt
tail -1 $R/verified.txt; grep -E "PASSED|FAILED|rc" $R/gpu-tests.txt; for t in memcheck racecheck synccheck; do grep -E "SUMMARY|exit" $R/san-$t.txt; done
