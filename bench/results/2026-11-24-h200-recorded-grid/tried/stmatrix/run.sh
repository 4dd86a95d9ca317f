#!/bin/bash
# Narrow tile P^T by stmatrix.trans (new) against st.shared.b16 per value (base): A/B interleaved,
# each twice, settled; then checks of new (verified bench rows, Sm90 GPU tests, sanitizers).
OUT=${OUT:-/tmp/out}; R=$OUT/r2; mkdir -p $R
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
    run $b h16s2b8 --heads 16 --s-q 2 --batch 8 --seq-len 8192 --backend sm90:5
  done
done
timeout 120 .bin/mlakit-new bench --pdl --heads 16,32 --s-q 1,2 --batch 1,8,64 --seq-len 1024,8192 --var 0,1 --backend sm90:3,sm90:4,sm90:5 > $R/verified.txt 2>&1
echo "verified rc $? ok $(grep -c ' ok ' $R/verified.txt) of $(grep -c '^sm90' $R/verified.txt)" >> $R/verified.txt
T=.bin/mlakit_gpu_tests-new
timeout 200 $T --gtest_filter='Sm90*' --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?" >> $R/gpu-tests.txt
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 3 $T --gtest_filter='Sm90Sanitize.*' --gtest_brief=1 > $R/san-$tool.txt 2>&1
  echo "$tool exit $?" >> $R/san-$tool.txt
done
tar czf $OUT/r2.tgz -C $OUT r2
for f in $R/ab-*.txt; do cat $f; done | grep -E "^##|^ *sm9" | awk '{ if ($1=="##") printf "%s ", $2; else print $1, $2, $3, $4, $5, $8 }'
tail -1 $R/verified.txt; grep -E "PASSED|FAILED|rc" $R/gpu-tests.txt; for t in memcheck racecheck synccheck; do grep -E "SUMMARY|exit" $R/san-$t.txt; done
