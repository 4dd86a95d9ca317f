#!/bin/bash
# Session 27 call 1: compute-sanitizer over a6f7ea0 (main); the V4 gather-address branch's tests,
# sanitizer on its sparse sweep, and its V4 rows against main.
set -u
mkdir -p /tmp/bm/tests /tmp/bw/tests /tmp/b
xz -dc .peers/ab/gpu-tests-main.xz > /tmp/bm/tests/mlakit_gpu_tests
xz -dc .peers/ab/gpu-tests-v4.xz > /tmp/bw/tests/mlakit_gpu_tests

chmod +x /tmp/bm/tests/* /tmp/bw/tests/*
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
SANITIZE_LOGS=/tmp/sanlogs timeout 400 scripts/sanitize.sh /tmp/bm > $OUT/sanitize-main.txt 2>&1; echo "sanitize rc $?" >> $OUT/sanitize-main.txt
timeout 60 /tmp/bw/tests/mlakit_gpu_tests --gtest_filter='Sm90Sparse.*:Sm80Sparse.V4*' --gtest_brief=1 > $OUT/v4-tests.txt 2>&1
S=/usr/local/cuda/bin/compute-sanitizer
for t in memcheck racecheck; do timeout 60 $S --tool $t /tmp/bw/tests/mlakit_gpu_tests --gtest_filter='Sm90Sanitize.Sparse' --gtest_brief=1 2>&1 | grep -E "SUMMARY|PASSED|FAILED|Hazard|Invalid" | head -5 | sed "s/^/v4 $t: /" >> $OUT/v4-tests.txt; done

cp /tmp/ab/summary.txt $OUT/ab-v4.txt 2>/dev/null
tar cf $OUT/raw.tar -C /tmp sanlogs ab 2>/dev/null
grep -E "^==|SUMMARY|PASSED|FAILED|rc" $OUT/sanitize-main.txt; grep -E "PASSED|FAILED|v4 " $OUT/v4-tests.txt; cat $OUT/ab-v4.txt
