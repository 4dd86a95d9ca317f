#!/bin/bash
# The mma kernel's widening without byte permutes (E) against ffbef4e (O): the sparse GPU tests on
# E, then a few rows with both, twice.
set -u
mkdir -p /tmp/b /tmp/j && for f in mlakit-O mlakit-E gpu-tests; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
timeout 120 /tmp/b/gpu-tests --gtest_filter='Sm90Sparse.*' > $OUT/tests.txt 2>&1
grep -E "^\[  (PASSED|FAILED)|FAILED \]" $OUT/tests.txt | head
cd /tmp/j
B="--dtype fp8-blockwise --q-dtype bf16 --seq-len 8192 --pdl --settle-ms 200 --replays 20 --verify-requests 1 --backend auto"
for rep in 1 2; do for v in O E; do
  timeout 60 /tmp/b/mlakit-$v bench $B --topk 2048 --heads 16 --s-q 1 --batch 1,32,128 --json r${rep}_${v}_a.json > /dev/null 2>&1
  timeout 60 /tmp/b/mlakit-$v bench $B --topk 512 --heads 8,64 --s-q 2 --batch 8,128 --json r${rep}_${v}_b.json > /dev/null 2>&1
done; done
python3 - <<'PY' | tee $OUT/summary.txt
import json,glob
T={}
for f in sorted(glob.glob('r*_*.json')):
  rep,v,_=f.split('_')
  for r in json.load(open(f))['results']:
    T.setdefault((r['h_q'],r['s_q'],r['batch'],r['topk']),{}).setdefault(v,[]).append((round(r['time_us'],1),r['tactic'],r['check']))
for k,d in sorted(T.items()): print(k,' '.join(f"{v}:{d.get(v)}" for v in ['O','E']))
PY
tar cf $OUT/raw.tar *.json
