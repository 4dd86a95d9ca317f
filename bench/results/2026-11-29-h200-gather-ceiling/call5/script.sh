#!/bin/bash
# Session 28 call 5: the mma kernel's consumers in parts, tactic 13, none with the producer's
# copies: pr2 the consumers alone, pr3 without the S parts' stores and the first barrier, pr4
# without P V (ldmatrix, movmatrix, the products). Three rounds interleaved.
set -u
mkdir -p /tmp/b
for f in mlakit-pr2 mlakit-pr3 mlakit-pr4; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
B="--pdl --settle-ms 200 --replays 20 --seq-len 8192 --dtype fp8-blockwise --q-dtype bf16 --no-verify"
for round in 1 2 3; do
for v in pr2 pr3 pr4; do
  echo "== $v round $round" >> $OUT/probes.txt
  /tmp/b/mlakit-$v bench $B --topk 2048 --backend sm90:13 --heads 8,16 --s-q 1 --batch 32,64,128 2>&1 | grep sm90 >> $OUT/probes.txt
done
done
cat $OUT/probes.txt
