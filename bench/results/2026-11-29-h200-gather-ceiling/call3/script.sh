#!/bin/bash
# Session 28 call 3: gather_copy_rate (plain loads from 8 warps an SM, batch 64's size); the mma
# kernel's probes at h_q 8/16 (pr1: consumers only release the stages; pr2: the producer copies
# nothing) against main (G), tactic 13; h_q 32 tactics 13 and 9 side by side on main.
set -u
mkdir -p /tmp/b
for f in mlakit-G mlakit-pr1 mlakit-pr2; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
.peers/gcr/gather_copy_rate > $OUT/gcr.txt 2>&1
B="--pdl --settle-ms 200 --replays 20 --seq-len 8192 --dtype fp8-blockwise --q-dtype bf16 --topk 2048"
for round in 1 2; do
for v in G pr1 pr2; do
  V=--verify-requests\ 1; [[ $v != G ]] && V=--no-verify
  /tmp/b/mlakit-$v bench $B $V --backend sm90:13 --heads 8,16 --s-q 1 --batch 32,64,128 --json $OUT/probe-$v-$round.json > $OUT/probe-$v-$round.txt 2>&1
done
done
/tmp/b/mlakit-G bench $B --verify-requests 1 --backend sm90:13,sm90:9,auto --heads 32 --s-q 1,2 --batch 64,128 > $OUT/hq32.txt 2>&1
for v in G pr1 pr2; do for r in 1 2; do echo "== $v round $r"; grep -E "sm90" $OUT/probe-$v-$r.txt | head -8; done; done > $OUT/probes.txt
tar cf $OUT/probes.tar -C $OUT $(cd $OUT && ls probe-*) && rm $OUT/probe-*
cat $OUT/probes.txt
grep -E "ld |over|cp.async +[0-9.]+ +8 +4" $OUT/gcr.txt | head -60
grep sm90 $OUT/hq32.txt
