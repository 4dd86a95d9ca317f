#!/bin/bash
# A/B: sparse mma kernel (old = 5987f42, new = working tree), plus the sparse GPU tests (new).
set -u
mkdir -p /tmp/b && cd /tmp/b && for f in mlakit-old mlakit-new gpu-tests; do xz -dc $OLDPWD/.peers/ab/$f.xz > $f && chmod +x $f; done
cd $OUT
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > gpu.txt
timeout 240 /tmp/b/gpu-tests --gtest_filter='Sm90Sparse.*:Sm90Sanitize.Sparse:GpuViews.SparseProblemsTakeCacheViews:Tune*' > tests.txt 2>&1
grep -E "^\[  (PASSED|FAILED)|tests? ran" tests.txt
B="--dtype fp8-blockwise --q-dtype bf16 --seq-len 8192 --pdl --settle-ms 200 --replays 20 --verify-requests 1 --backend auto"
for k in 2048 512; do
  for v in old new; do
    timeout 120 /tmp/b/mlakit-$v bench $B --topk $k --heads 8,16,32 --s-q 1,2 --batch 1,8,32,64,128 --json ${v}_$k.json > ${v}_$k.txt 2>&1
    timeout 40 /tmp/b/mlakit-$v bench $B --topk $k --heads 64,128 --s-q 1 --batch 1 --json ${v}_b1_$k.json > ${v}_b1_$k.txt 2>&1
  done
done
python3 - <<'PY' > summary.txt
import json,glob,math
def load(v,k):
  T={}
  for f in [f'{v}_{k}.json',f'{v}_b1_{k}.json']:
    try:
      for r in json.load(open(f))['results']: T[(r['h_q'],r['s_q'],r['batch'])]=(r['time_us'],r['tactic'],r['check'])
    except Exception as e: print('missing',f,e)
  return T
for k in (2048,512):
  o,n=load('old',k),load('new',k); rs=[]
  print(f'topk {k}: h_q s_q batch | old us (tactic) | new us (tactic) | old/new | check new')
  for key in sorted(o):
    if key in n:
      a,b=o[key],n[key]; rs.append(a[0]/b[0])
      print(key, f'{a[0]:.1f} ({a[1]})', f'{b[0]:.1f} ({b[1]})', f'{a[0]/b[0]:.3f}', b[2])
  if rs: print('geomean old/new', math.exp(sum(map(math.log,rs))/len(rs)), 'min', min(rs), 'max', max(rs))
PY
cat summary.txt
