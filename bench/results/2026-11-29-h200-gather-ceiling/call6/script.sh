#!/bin/bash
# Session 28 call 6: where the mma kernel's 64 movmatrix a block run. M = main (ptxas puts them
# among P V's products, after the third barrier); A = K's registers transposed in place after the
# S parts' stores (ptxas still sinks 51 of them past the third barrier); C = the same, the first
# barrier made a bar.red whose predicate is built from every transposed register (so all 64 run
# before it, among S's products; 34 more instructions a block). A/B M against C and M against A.
set -u
mkdir -p /tmp/b
for f in mlakit-M mlakit-A mlakit-C; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
B="--pdl --settle-ms 200 --replays 20 --verify-requests 1 --seq-len 8192 --dtype fp8-blockwise --q-dtype bf16"
timeout 250 scripts/ab-bench.sh /tmp/b/mlakit-M /tmp/b/mlakit-C /tmp/abC 2 \
  -- --topk 2048 --heads 8,16,32 --s-q 1 --batch 1,32,64,128 $B \
  -- --topk 2048 --heads 64 --s-q 1 --batch 8 $B \
  -- --topk 512 --heads 16 --s-q 1 --batch 128 $B > /dev/null 2>&1
timeout 150 scripts/ab-bench.sh /tmp/b/mlakit-M /tmp/b/mlakit-A /tmp/abA 2 \
  -- --topk 2048 --heads 16 --s-q 1 --batch 32,128 $B > /dev/null 2>&1
cp /tmp/abC/summary.txt $OUT/ab-C.txt; cp /tmp/abA/summary.txt $OUT/ab-A.txt
tar cf $OUT/raw.tar -C /tmp abC abA
cat $OUT/ab-C.txt $OUT/ab-A.txt
