#!/bin/bash
# ffbef4e: the tuner and sparse GPU tests, then the issue's V3.2 grid with auto (untuned).
set -u
mkdir -p /tmp/b /tmp/j && for f in mlakit-O gpu-tests; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 200 /tmp/b/gpu-tests --gtest_filter='Tune*:Sm90Sparse.*' > $OUT/tests.txt 2>&1
grep -E "^\[  (PASSED|FAILED)|FAILED \]" $OUT/tests.txt | head
cd /tmp/j
B="--dtype fp8-blockwise --q-dtype bf16 --seq-len 8192 --pdl --settle-ms 200 --replays 20 --verify-requests 1 --backend auto"
for k in 2048 512; do
  timeout 190 /tmp/b/mlakit-O bench $B --topk $k --heads 8,16,32,64,128 --s-q 1,2 --batch 1,8,32,64,128 --json g_$k.json > g_$k.txt 2>&1
done
python3 - <<'PY' > $OUT/summary.txt
import json
ref={}
for l in open('/dev/null'): pass
for k in (2048,512):
  T={}
  for r in json.load(open(f'g_{k}.json'))['results']:
    T.setdefault((r['h_q'],r['s_q']),{})[r['batch']]=(r['time_us'],r['tactic'],100*r['bytes']/r['time_us']/1e6/4.6,r['check'])
  print(f'topk {k}: h_q x s_q | batch 1 | 8 | 32 | 64 | 128 (us (tactic)) | % read roof at 128')
  for key,d in sorted(T.items()):
    print(f'{key[0]} x {key[1]} | '+' | '.join(f'{d[b][0]:.1f} ({d[b][1]})' for b in (1,8,32,64,128) if b in d)+f' | {d[128][2]:.0f}%' if 128 in d else '')
  bad=[(k2,b,v[3]) for k2,d in T.items() for b,v in d.items() if not v[3].startswith('ok')]
  print('checks not ok:',bad)
PY
tar cf $OUT/raw.tar *.json *.txt
cat $OUT/summary.txt
