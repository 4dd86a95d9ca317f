#!/bin/bash
# After the part_length refactor: GPU tests, sanitizers, and the equal-cut cases (must match 5b781a7).
OUT=${OUT:-/tmp/out}; R=$OUT/rf; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/device.txt
timeout 200 .bin/mlakit_gpu_tests --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?" >> $R/gpu-tests.txt
for tf in "memcheck Sm80Sanitize.*:Sm90Sanitize.*" "racecheck Sm80Sanitize.*:Sm90Sanitize.*" "synccheck Sm90Sanitize.*"; do
  set -- $tf
  timeout 150 compute-sanitizer --tool $1 --error-exitcode 3 .bin/mlakit_gpu_tests --gtest_filter="$2" --gtest_brief=1 > $R/san-$1.txt 2>&1
  echo "$1 exit $?" >> $R/san-$1.txt
done
timeout 120 .bin/mlakit bench --pdl --settle-ms 300 --heads 128,16 --batch 8,32,64 --seq-len 4096 --backend sm80:0,sm90:0 > $R/bench.txt 2>&1
tar czf $OUT/rf.tgz -C $OUT rf
grep -E "PASSED|FAILED|rc" $R/gpu-tests.txt; for t in memcheck racecheck synccheck; do grep -E "SUMMARY|exit" $R/san-$t.txt; done
grep "^sm" $R/bench.txt | awk '{print $1,$2,$4,$5,$8,$NF, $(NF-1)}'
