#!/bin/bash
# Persistent plan, equal requests cut into parts: blocks cut equally (new) against the line with
# each request's fixed cost in front (base). A/B interleaved, each twice, settled; then checks.
OUT=${OUT:-/tmp/out}; R=$OUT/r5; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > $R/device.txt
run() { # bin tag args...
  local b=$1 tag=$2; shift 2
  echo "## $b $*" >> $R/ab-$tag.txt
  timeout 120 .bin/$b bench --pdl --no-verify --settle-ms 300 "$@" 2>&1 | grep -v "^device\|^backend" >> $R/ab-$tag.txt
}
for rep in 1 2; do
  for b in mlakit-base mlakit-new; do
    run $b s80h16 --heads 16 --batch 8,32,64,128 --seq-len 4096,8192 --backend sm80:0
    run $b s80h16var --heads 16 --batch 64 --seq-len 4096 --var 1 --backend sm80:0
    run $b s80h128 --heads 128 --batch 8,32,64 --seq-len 4096 --backend sm80:0
    run $b s90n --heads 16 --batch 32,64,128 --seq-len 4096,8192 --backend sm90:3
    run $b s90w --heads 128,64 --batch 8,32 --seq-len 4096,8192 --backend sm90:0
  done
done
timeout 150 .bin/mlakit-new bench --pdl --heads 16,128 --s-q 1,2 --batch 1,8,32,64 --seq-len 1024,4096 --backend sm80:0,sm90:0,sm90:3 > $R/verified.txt 2>&1
echo "verified rc $? ok $(grep -c ' ok ' $R/verified.txt) of $(grep -c '^sm' $R/verified.txt)" >> $R/verified.txt
T=.bin/mlakit_gpu_tests-new
timeout 200 $T --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?" >> $R/gpu-tests.txt
for tf in "memcheck Sm80Sanitize.*:Sm90Sanitize.*" "racecheck Sm80Sanitize.*:Sm90Sanitize.*" "synccheck Sm90Sanitize.*"; do
  set -- $tf
  timeout 150 compute-sanitizer --tool $1 --error-exitcode 3 $T --gtest_filter="$2" --gtest_brief=1 > $R/san-$1.txt 2>&1
  echo "$1 exit $?" >> $R/san-$1.txt
done
tar czf $OUT/r5.tgz -C $OUT r5
for f in $R/ab-*.txt; do cat $f; done | grep -E "^##|^ *sm[89]" | awk '{ if ($1=="##") printf "%s ", $2; else print $1, $2, $4, $5, $6, $8 }'
tail -1 $R/verified.txt; grep -v " ok \|^device\|^backend" $R/verified.txt | head -5; grep -E "PASSED|FAILED|rc" $R/gpu-tests.txt; for t in memcheck racecheck synccheck; do grep -E "SUMMARY|exit" $R/san-$t.txt; done
