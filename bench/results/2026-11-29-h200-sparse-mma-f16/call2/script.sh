#!/bin/bash
# Session 27 call 2: B = main + the V4 gather addresses + the sparse mma kernel in fp16 (cvt
# widening). Its GPU tests (sparse, tune), the sanitizers on the sparse sweep, then A/B against
# main (a6f7ea0) on the mma kernel's rows and the V4 rows.
set -u
mkdir -p /tmp/b
for f in mlakit-main mlakit-B gpu-tests-B; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 150 /tmp/b/gpu-tests-B --gtest_filter='Sm90Sparse.*:Tune*:Sm80Sparse.*:Sm90Sanitize.Sparse' > $OUT/tests.txt 2>&1
S=/usr/local/cuda/bin/compute-sanitizer
for t in memcheck racecheck synccheck; do timeout 90 $S --tool $t /tmp/b/gpu-tests-B --gtest_filter='Sm90Sanitize.Sparse' --gtest_brief=1 2>&1 | grep -E "SUMMARY|PASSED|FAILED|Hazard|Invalid" | head -5 | sed "s/^/$t: /" >> $OUT/tests.txt; done
B="--pdl --settle-ms 200 --replays 20 --verify-requests 1 --seq-len 8192"
timeout 330 scripts/ab-bench.sh /tmp/b/mlakit-main /tmp/b/mlakit-B /tmp/ab 2 \
  -- --dtype fp8-blockwise --q-dtype bf16 --topk 2048 --heads 8,16,32 --s-q 1 --batch 1,8,32,128 $B \
  -- --dtype fp8-blockwise --q-dtype bf16 --topk 512 --heads 8,16,32 --s-q 1 --batch 8,128 $B \
  -- --dtype fp8-blockwise --q-dtype bf16 --topk 2048 --heads 64,128 --s-q 1 --batch 1 $B \
  -- --layout v4 --q-dtype bf16 --topk 512 --extra-topk 128 --heads 64,128 --s-q 1 --batch 1,32,128 $B > /dev/null 2>&1
cp /tmp/ab/summary.txt $OUT/ab.txt
tar cf $OUT/raw.tar -C /tmp ab
grep -E "^\[  (PASSED|FAILED)|FAILED \]|memcheck|racecheck|synccheck" $OUT/tests.txt | head -20; cat $OUT/ab.txt
