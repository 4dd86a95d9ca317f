#!/bin/bash
# The same kernel (main, tactic 0; pairs, tactic 6) on random KV and on a constant KV cache: same
# bytes moved, little toggling in the data path. Steady state (300 replays).
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
for rep in 1 2; do
  for kv in random 0 0.25; do
    for t in 0 6; do
      if [ $kv = random ]; then unset MLAKIT_EXPERIMENT_KV_CONST; else export MLAKIT_EXPERIMENT_KV_CONST=$kv; fi
      echo "kv=$kv $(timeout 60 .bin/mlakit-exp bench --heads 128 --batch 128 --seq-len 8192 --backend sm90:$t --pdl --no-verify --replays 300 2>&1 | grep '^sm90')"
    done
  done
done | tee $OUT/kvconst.txt
