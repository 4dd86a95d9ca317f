#!/bin/bash
# db0bb49 (P): the whole GPU suite; then h_q 64 and 128 at small batches, the mma kernel's cluster
# schedule (13) against the split kernel's (12) and auto.
set -u
mkdir -p /tmp/b /tmp/j && for f in mlakit-P gpu-tests; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 330 /tmp/b/gpu-tests > $OUT/suite.txt 2>&1
grep -E "^\[  (PASSED|FAILED)|tests? ran|SKIPPED \]|FAILED \]" $OUT/suite.txt | head -20
cd /tmp/j
B="--dtype fp8-blockwise --q-dtype bf16 --seq-len 8192 --pdl --settle-ms 200 --replays 20 --verify-requests 1"
for k in 2048 512; do
  timeout 150 /tmp/b/mlakit-P bench $B --topk $k --heads 64,128 --s-q 1,2 --batch 1,2,4,8,16 --backend sm90:13,sm90:12,auto --json f_$k.json > f_$k.txt 2>&1
done
python3 - <<'PY' > $OUT/summary.txt
import json
for k in (2048,512):
  T={}
  for r in json.load(open(f'f_{k}.json'))['results']:
    T.setdefault((r['h_q'],r['s_q'],r['batch']),{})['auto' if r['backend'].startswith('auto') else r['tactic']]=(r['time_us'],r['tactic'],r['check'])
  print(f'topk {k}: (h_q, s_q, batch) | 13 | 12 | auto (its tactic) | 12/13')
  for key,d in sorted(T.items()):
    a=d.get(13); b=d.get(12); c=d.get('auto')
    print(key, a and f'{a[0]:.1f}', b and f'{b[0]:.1f}', c and f'{c[0]:.1f} ({c[1]})', a and b and f'{b[0]/a[0]:.3f}', a and a[2])
PY
tar cf $OUT/raw.tar *.json *.txt
cat $OUT/summary.txt
