#!/bin/bash
# Session 30 call 1: branch indexer-tid (T: quad index by shuffle, scale vote after the wgmma wait) against main (M).

set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit-T gpu-tests-T mlakit-M; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
timeout 200 /tmp/b/gpu-tests-T --gtest_filter="OpsGpu.*:Ops*" > $W/tests.txt 2>&1
echo "rc $?" >> $W/tests.txt
grep -E "^\[  (PASSED|FAILED)|FAILED \]|^rc " $W/tests.txt | head -20
B="--kernel auto --heads 64 --batch 1,32,128 --len 8192,32768,131072 --next-n 1,2 --replays 10 --settle-ms 300"
for r in 1 2; do
  for side in M T; do
    v="--no-verify"; [[ $r == 1 && $side == T ]] && v=""
    timeout 120 /tmp/b/mlakit-$side bench-op indexer $B $v --json $W/ix_${side}_$r.json > $W/ix_${side}_$r.txt 2>&1
  done
done
echo "T verify FAIL/ERROR lines: $(grep -c -E 'FAIL|ERROR' $W/ix_T_1.txt)"
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os
W=os.environ['OUT']+'/w'
def load(f):
    try: return {(r['batch'],r['len'],r['next_n']):r for r in json.load(open(f))['results'] if r.get('time_us')}
    except Exception as e: return {}
d={}
S=['M','T']
for side in S:
    rs=[load(f'{W}/ix_{side}_{r}.json') for r in (1,2)]
    keys=set().union(*rs)
    d[side]={k:[x[k]['time_us'] for x in rs if k in x] for k in keys}
    d[side+'mhz']={k:x[k].get('sm_mhz') for x in rs for k in x}
print('b len n | M us (2 rounds) | T us (2 rounds) | M/T (min) | MHz M R')
for k in sorted(d['M']):
    m=d['M'][k]; r=d['T'].get(k,[0])
    print(k, '/'.join(f"{v:.1f}" for v in m), '|', '/'.join(f"{v:.1f}" for v in r), '|', f"{min(m)/min(r):.3f}" if min(r) else '-', '|', d['Mmhz'].get(k), d['Tmhz'].get(k))
PY
