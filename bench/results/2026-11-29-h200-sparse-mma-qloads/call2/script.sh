#!/bin/bash
# Which of the three changes slowed the sparse mma kernel: old, A (Q 4-byte loads), B (A + no
# tail predicates), C (softmax by heads + no predicates, Q as before), new (all three).
set -u
mkdir -p /tmp/b && for v in old B new; do xz -dc .peers/ab/mlakit-$v.xz > /tmp/b/m-$v && chmod +x /tmp/b/m-$v; done
cd $OUT
B="--dtype fp8-blockwise --q-dtype bf16 --seq-len 8192 --pdl --settle-ms 200 --replays 20 --verify-requests 1 --backend auto"
for rep in 1 2; do for v in old B new; do
  /tmp/b/m-$v bench $B --topk 2048 --heads 16 --s-q 1 --batch 1,32,128 --json r${rep}_${v}_a.json > /dev/null 2>&1
  /tmp/b/m-$v bench $B --topk 512 --heads 8 --s-q 2 --batch 128 --json r${rep}_${v}_b.json > /dev/null 2>&1
done; done
python3 - <<'PY' | tee summary.txt
import json,glob
T={}
for f in glob.glob('r*_*.json'):
  rep,v,_=f.split('_')
  for r in json.load(open(f))['results']:
    T.setdefault((r['h_q'],r['s_q'],r['batch'],r['topk'] if 'topk' in r else 0),{}).setdefault(v,[]).append(round(r['time_us'],1))
for k,d in sorted(T.items()):
  print(k,' '.join(f"{v}:{d.get(v)}" for v in ['old','A','B','C','new']))
PY
