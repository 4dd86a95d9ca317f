#!/bin/bash
# Session 28 call 8: the consumers alone (the producer copies nothing) of main's mma kernel (pr2)
# and of the dim-quarter warps (Qpr2, branch wip/sm90-smma-quarters), and Q whole; tactic 13,
# three rounds interleaved.
set -u
mkdir -p /tmp/b
for f in mlakit-pr2 mlakit-Qpr2 mlakit-Q; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
B="--pdl --settle-ms 200 --replays 20 --seq-len 8192 --dtype fp8-blockwise --q-dtype bf16"
for round in 1 2 3; do
for v in pr2 Qpr2 Q; do
  V=--no-verify; [[ $v == Q ]] && V=--verify-requests\ 1
  echo "== $v round $round" >> $OUT/probes.txt
  /tmp/b/mlakit-$v bench $B $V --topk 2048 --backend sm90:13 --heads 8,16 --s-q 1 --batch 8,32,64,128 2>&1 | grep sm90 >> $OUT/probes.txt
done
done
cat $OUT/probes.txt
