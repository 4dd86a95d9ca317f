#!/bin/bash
# Session 27 call 4: D = C + k_scale on the NoPE part only in the sparse narrow and mma kernels
# (tactics 8-11, 13; they scaled the RoPE part too). Its sparse GPU tests and sanitizers; A/B
# main (a6f7ea0) against D: the V4 rows (the gather addresses) and the sparse narrow kernel's rows.
set -u
mkdir -p /tmp/b
for f in mlakit-main mlakit-D gpu-tests-D; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 200 /tmp/b/gpu-tests-D --gtest_filter='Sm90Sparse.*:Sm80Sparse.*:Tune*:GpuViews.*:Sm90Sanitize.*:Sm90Pdl.*:Sm90Graph.*' > $OUT/tests.txt 2>&1
S=/usr/local/cuda/bin/compute-sanitizer
for t in memcheck racecheck synccheck initcheck; do timeout 100 $S --tool $t /tmp/b/gpu-tests-D --gtest_filter='Sm90Sanitize.Sparse' --gtest_brief=1 2>&1 | grep -E "SUMMARY|PASSED|FAILED|Hazard|Invalid" | head -5 | sed "s/^/$t: /" >> $OUT/tests.txt; done
B="--pdl --settle-ms 200 --replays 20 --verify-requests 1 --seq-len 8192"
timeout 200 scripts/ab-bench.sh /tmp/b/mlakit-main /tmp/b/mlakit-D /tmp/ab 2 \
  -- --layout v4 --q-dtype bf16 --topk 512 --extra-topk 128 --heads 64,128 --s-q 1 --batch 1,32,128 $B \
  -- --layout v4 --q-dtype bf16 --topk 1024 --extra-topk 128 --heads 64,128 --s-q 1 --batch 1,32,128 $B \
  -- --dtype fp8-blockwise --q-dtype bf16 --topk 2048 --heads 32 --s-q 1,2 --batch 64,128 --backend sm90:9 $B > /dev/null 2>&1
cp /tmp/ab/summary.txt $OUT/ab.txt
tar cf $OUT/raw.tar -C /tmp ab
grep -E "^\[  (PASSED|FAILED)|FAILED \]|memcheck|racecheck|synccheck|initcheck" $OUT/tests.txt | head -20; cat $OUT/ab.txt
