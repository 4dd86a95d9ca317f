#!/bin/bash
# Session 28 call 4: M = main + the order change (h_q 17-32: the mma kernel's cluster schedule
# first up to 256 of its tiles at topk above 512). GPU tests on M; h_q 32 tactics 13, 9 and auto
# side by side at topk 1024 and 2048; M against pr2 (the producer copies nothing), tactic 13.
set -u
mkdir -p /tmp/b
for f in mlakit-M gpu-tests-M mlakit-pr2; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 150 /tmp/b/gpu-tests-M --gtest_filter='Sm90Sparse.*:Sm80Sparse.*:Tune*:GpuViews.*:Sm90Pdl.*:Sm90Graph.*' > $OUT/tests.txt 2>&1
B="--pdl --settle-ms 200 --replays 20 --seq-len 8192 --dtype fp8-blockwise --q-dtype bf16"
for k in 2048 1024; do
  /tmp/b/mlakit-M bench $B --topk $k --verify-requests 1 --backend sm90:13,sm90:9,auto --heads 32 --s-q 1,2 --batch 64,128 >> $OUT/hq32.txt 2>&1
done
for round in 1 2; do
for v in M pr2; do
  V=--verify-requests\ 1; [[ $v != M ]] && V=--no-verify
  echo "== $v round $round" >> $OUT/probes.txt
  /tmp/b/mlakit-$v bench $B --topk 2048 $V --backend sm90:13 --heads 8,16 --s-q 1 --batch 64,128 2>&1 | grep sm90 >> $OUT/probes.txt
done
done
grep -E "^\[  (PASSED|FAILED)|FAILED \]" $OUT/tests.txt | head; cat $OUT/probes.txt; grep sm90 $OUT/hq32.txt
