#!/bin/bash
# The sparse mma kernel's Q loads and unconditional stage loads (B) against 5987f42 (old): the
# sparse GPU tests on B, then the issue's h_q 8-32 grid (and h_q 64/128 at batch 1) with both.
set -u
mkdir -p /tmp/b && for f in mlakit-old mlakit-B gpu-tests; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
cd $OUT
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > gpu.txt
timeout 300 /tmp/b/gpu-tests --gtest_filter='Sm90Sparse.*:Sm90Sanitize.Sparse:GpuViews.SparseProblemsTakeCacheViews:Tune*' > tests.txt 2>&1
grep -E "^\[  (PASSED|FAILED)|tests? ran" tests.txt
B="--dtype fp8-blockwise --q-dtype bf16 --seq-len 8192 --pdl --settle-ms 200 --replays 20 --verify-requests 1 --backend auto"
for k in 2048 512; do
  for v in old B; do
    timeout 120 /tmp/b/mlakit-$v bench $B --topk $k --heads 8,16,32 --s-q 1,2 --batch 1,8,32,64,128 --json ${v}_$k.json > /dev/null 2>&1
    timeout 40 /tmp/b/mlakit-$v bench $B --topk $k --heads 64,128 --s-q 1 --batch 1 --json ${v}_b1_$k.json > /dev/null 2>&1
  done
done
python3 - <<'PY' > summary.txt
import json,math
def load(v,k):
  T={}
  for f in [f'{v}_{k}.json',f'{v}_b1_{k}.json']:
    try:
      for r in json.load(open(f))['results']: T[(r['h_q'],r['s_q'],r['batch'])]=(r['time_us'],r['tactic'],r['check'],r.get('power_w'),r.get('sm_mhz'))
    except Exception as e: print('missing',f,e)
  return T
for k in (2048,512):
  o,n=load('old',k),load('B',k); rs=[]
  print(f'topk {k}: (h_q, s_q, batch) | 5987f42 us (tactic) | new us (tactic) | old/new | check new')
  for key in sorted(o):
    if key in n:
      a,b=o[key],n[key]; rs.append(a[0]/b[0])
      print(key, f'{a[0]:.1f} ({a[1]})', f'{b[0]:.1f} ({b[1]})', f'{a[0]/b[0]:.3f}', b[2])
  if rs: print('geomean old/new %.4f min %.3f max %.3f' % (math.exp(sum(map(math.log,rs))/len(rs)), min(rs), max(rs)))
PY
tar cf raw.tar *.json tests.txt gpu.txt
cat summary.txt
