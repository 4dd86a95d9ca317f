#!/bin/bash
# Session 31 call 13: main at 3a73b8d (code; later commits docs), auto over the standard grid:
# e4m3 q and cache at h_q 64 and 128, s_q 1 and 2; bf16 at h_q 128 s_q 1; against FlashMLA bf16.
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
xz -dc .peers/ab/mlakit.xz > /tmp/b/mlakit; chmod +x /tmp/b/mlakit
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
timeout 130 /tmp/b/mlakit bench --dtype fp8 --q-dtype fp8 --grid standard --heads 64,128 --s-q 1,2 --pdl --settle-ms 300 \
  --verify-requests 1 --backend auto --reference .peers/ab/ref.csv --json $W/f8grid.json > $W/f8grid.txt 2>&1; echo "f8 rc $?"
timeout 60 /tmp/b/mlakit bench --grid standard --heads 128 --s-q 1 --pdl --settle-ms 300 \
  --verify-requests 1 --backend auto --reference .peers/ab/ref.csv --json $W/bfgrid.json > $W/bfgrid.txt 2>&1; echo "bf rc $?"
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os,math
W=os.environ['OUT']+'/w'
ref={}
for line in open('.peers/ab/ref.csv'):
    if line[0] in '#h': continue
    f=line.strip().split(','); ref[tuple(int(x) for x in f[:5])]=float(f[5])
for g in ('f8grid','bfgrid'):
    try: d=json.load(open(f'{W}/{g}.json'))['results']
    except Exception as e: print(g,'no json',e); continue
    by={}
    for r in d:
        k=(r['h_q'],r['s_q'],r['batch'],r['seq_len'],int(r['var']))
        if k in ref: by.setdefault((r['h_q'],r['s_q']),[]).append(ref[k]/r['time_us'])
    for k,v in sorted(by.items()): print(g,k,len(v),'geomean',round(math.exp(sum(map(math.log,v))/len(v)),3),'min',round(min(v),3),'max',round(max(v),3))
PY
