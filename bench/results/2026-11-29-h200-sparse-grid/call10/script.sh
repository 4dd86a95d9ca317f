#!/bin/bash
mkdir -p /tmp/b && tar -xJf .peers/bin.txz -C /tmp/b
cd $OUT
M=/tmp/b/b/mlakit
B="--dtype fp8-blockwise --q-dtype bf16 --seq-len 8192 --pdl --settle-ms 200 --replays 20 --verify-requests 1"
for k in 512 1024 2048; do
  timeout 100 $M bench $B --topk $k --heads 8,16 --s-q 2 --batch 128 --backend sm90:11,sm90:13 --json a_$k.json > a_$k.txt 2>&1
  timeout 100 $M bench $B --topk $k --heads 32 --s-q 1,2 --batch 64,128 --backend sm90:9,sm90:13 --json b_$k.json > b_$k.txt 2>&1
  timeout 150 $M bench $B --topk $k --heads 64,128 --s-q 1,2 --batch 64,128 --backend sm90:7,sm90:12 --json c_$k.json > c_$k.txt 2>&1
  echo "topk $k done"
done
python3 - <<'PY'
import json,glob
for f in sorted(glob.glob('*.json')):
  d=json.load(open(f))['results']
  T={}
  for r in d: T.setdefault((r['h_q'],r['s_q'],r['batch']),{})[r['tactic']]=r['time_us']
  for k,v in sorted(T.items()):
    print(f, k, ' '.join(f'{t}:{x:.1f}' for t,x in sorted(v.items())))
PY
