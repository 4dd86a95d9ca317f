#!/bin/bash
# Session 29 call 3: the two-row shape as two m64n64 groups (kernel 4, MLAKIT_IDX_V=1) against
# main's m64n128 (kernel 3), one binary (C = main + the experiment).
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit-C gpu-tests-C; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
MLAKIT_IDX_V=1 timeout 120 /tmp/b/gpu-tests-C --gtest_filter='OpsGpu.Indexer*' > $W/tests.txt 2>&1
echo "rc $?" >> $W/tests.txt
grep -E "^\[  (PASSED|FAILED)|FAILED \]|^rc " $W/tests.txt | head -20
B="--kernel auto --heads 64 --batch 1,32,128 --len 8192,32768,131072 --next-n 2 --replays 10 --settle-ms 300"
MLAKIT_IDX_V=1 timeout 100 /tmp/b/mlakit-C bench-op indexer --kernel auto --heads 64 --batch 32,128 --len 32768,131072 --next-n 2 --replays 5 --json $W/v.json > $W/v.txt 2>&1
echo "verify FAIL/ERROR lines: $(grep -c -E 'FAIL|ERROR' $W/v.txt)"
for r in 1 2; do
  for side in M S; do
    env=""; [[ $side == S ]] && env="MLAKIT_IDX_V=1"
    env $env timeout 100 /tmp/b/mlakit-C bench-op indexer $B --no-verify --json $W/ix_${side}_$r.json > $W/ix_${side}_$r.txt 2>&1
  done
done
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os
W=os.environ['OUT']+'/w'
def load(f):
    try: return {(r['batch'],r['len'],r['next_n'],r['heads']):r for r in json.load(open(f))['results'] if r.get('time_us')}
    except Exception as e: return {}
d={}
for side in ['M','S']:
    rs=[load(f'{W}/ix_{side}_{r}.json') for r in (1,2)]
    keys=set().union(*rs)
    d[side]={k:min(x[k]['time_us'] for x in rs if k in x) for k in keys}
    d[side+'mhz']={k:x[k].get('sm_mhz') for x in rs for k in x}
print('b len n h | main us | split us | main/split | MHz main split')
for k in sorted(d['M']):
    a=d['M'][k]; b=d['S'].get(k)
    print(k, f"{a:.1f} | {b:.1f} | {a/b:.3f} |", d['Mmhz'].get(k), d['Smhz'].get(k))
PY
