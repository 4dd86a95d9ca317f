#!/bin/bash
cd "$(dirname "$0")/.."
gunzip -kf .bin/mlakit-trace-w.gz; chmod +x .bin/mlakit-trace-w
nvidia-smi --query-gpu=name --format=csv,noheader
for rep in 1 2 3; do for v in base warm skip warmskip; do
  envs=""; case $v in warm) envs="MLAKIT_WARM=1";; skip) envs="MLAKIT_SKIP_COMBINE=1";; warmskip) envs="MLAKIT_WARM=1 MLAKIT_SKIP_COMBINE=1";; esac
  for c in "16 64 4096"; do
  read -r h b L <<<"$c"; tag=$v-h$h-b$b-L$L-$rep
  env $envs .bin/mlakit-trace-w bench --heads $h --batch $b --seq-len $L --backend sm80:0 --pdl --no-verify --settle-ms 300 > $OUT/$tag.log 2>&1
  echo "== $tag: $(grep -E '^sm80' $OUT/$tag.log | head -1)"
  [ $rep = 1 ] && python3 .bin/tl.py $OUT/$tag.log | grep -v "D entry\|D exit\|C entry"
done; done; done
# correctness with warm
MLAKIT_WARM=1 .bin/mlakit-trace-w bench --heads 16,128 --batch 1,64 --seq-len 4096 --backend sm80:0 --pdl --var 0,1 2>&1 | grep -E "^sm80|FAIL|mismatch" | head
