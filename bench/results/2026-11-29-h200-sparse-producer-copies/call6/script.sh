#!/bin/bash
# The sparse mma kernel in producer copy loop (P) against 23fb7c1 (B): the sparse GPU
# tests on P, then the h_q 8-32 grid (and h_q 64/128 at batch 1) with both.
set -u
mkdir -p /tmp/b /tmp/j && for f in mlakit-B mlakit-P gpu-tests; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 300 /tmp/b/gpu-tests --gtest_filter='Sm90Sparse.*:Sm90Sanitize.Sparse:GpuViews.SparseProblemsTakeCacheViews:Tune*' > $OUT/tests.txt 2>&1
grep -E "^\[  (PASSED|FAILED)|tests? ran|FAILED" $OUT/tests.txt | head -20
cd /tmp/j
B="--dtype fp8-blockwise --q-dtype bf16 --seq-len 8192 --pdl --settle-ms 200 --replays 20 --verify-requests 1 --backend auto"
for k in 2048 512; do
  for v in B P; do
    timeout 120 /tmp/b/mlakit-$v bench $B --topk $k --heads 8,16,32 --s-q 1,2 --batch 1,8,32,64,128 --json ${v}_$k.json > ${v}_$k.txt 2>&1
    timeout 40 /tmp/b/mlakit-$v bench $B --topk $k --heads 64,128 --s-q 1 --batch 1 --json ${v}_b1_$k.json > ${v}_b1_$k.txt 2>&1
  done
done
python3 - <<'PY' > $OUT/summary.txt
import json,math
def load(v,k):
  T={}
  for f in [f'{v}_{k}.json',f'{v}_b1_{k}.json']:
    try:
      for r in json.load(open(f))['results']: T[(r['h_q'],r['s_q'],r['batch'])]=(r['time_us'],r['tactic'],r['check'])
    except Exception as e: print('missing',f,e)
  return T
for k in (2048,512):
  o,n=load('B',k),load("P",k); rs=[]
  print(f'topk {k}: (h_q, s_q, batch) | 23fb7c1 us (tactic) | P us (tactic) | 23fb7c1/P | check P')
  for key in sorted(o):
    if key in n:
      a,b=o[key],n[key]; rs.append(a[0]/b[0])
      print(key, f'{a[0]:.1f} ({a[1]})', f'{b[0]:.1f} ({b[1]})', f'{a[0]/b[0]:.3f}', b[2])
  if rs: print('geomean %.4f min %.3f max %.3f over %d rows' % (math.exp(sum(map(math.log,rs))/len(rs)), min(rs), max(rs), len(rs)))
PY
tar cf $OUT/raw.tar *.json *.txt
cat $OUT/summary.txt
