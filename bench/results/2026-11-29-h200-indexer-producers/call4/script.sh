#!/bin/bash
# Session 29 call 4: the persistent indexer's producers: lean one-box path with a TMA for the
# scales (MLAKIT_IDX_LEAN), and test-and-sleep waits for an empty stage (MLAKIT_IDX_SLEEP=ns),
# against main's path, one binary (D = main + the experiments).
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit-D gpu-tests-D; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
MLAKIT_IDX_LEAN=1 MLAKIT_IDX_SLEEP=300 timeout 100 /tmp/b/gpu-tests-D --gtest_filter='OpsGpu.Indexer*:OpsGpu.GraphReplay*' > $W/tests.txt 2>&1
echo "rc $?" >> $W/tests.txt
grep -E "^\[  (PASSED|FAILED)|FAILED \]|^rc " $W/tests.txt | head -20
B="--kernel auto --heads 64 --batch 1,32,128 --len 8192,32768,131072 --next-n 1,2 --replays 10 --settle-ms 300"
for r in 1 2; do
  for side in M L S LS; do
    env="X=1"
    [[ $side == L ]] && env="MLAKIT_IDX_LEAN=1"
    [[ $side == S ]] && env="MLAKIT_IDX_SLEEP=300"
    [[ $side == LS ]] && env="MLAKIT_IDX_LEAN=1 MLAKIT_IDX_SLEEP=300"
    v="--no-verify"; [[ $r == 1 && $side == LS ]] && v=""
    env $env timeout 120 /tmp/b/mlakit-D bench-op indexer $B $v --json $W/ix_${side}_$r.json > $W/ix_${side}_$r.txt 2>&1
  done
done
echo "LS verify FAIL/ERROR lines: $(grep -c -E 'FAIL|ERROR' $W/ix_LS_1.txt)"
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os
W=os.environ['OUT']+'/w'
def load(f):
    try: return {(r['batch'],r['len'],r['next_n']):r for r in json.load(open(f))['results'] if r.get('time_us')}
    except Exception as e: return {}
d={}
S=['M','L','S','LS']
for side in S:
    rs=[load(f'{W}/ix_{side}_{r}.json') for r in (1,2)]
    keys=set().union(*rs)
    d[side]={k:min(x[k]['time_us'] for x in rs if k in x) for k in keys}
    d[side+'mhz']={k:x[k].get('sm_mhz') for x in rs for k in x}
print('b len n | M us | L | S | LS | M/L M/S M/LS | MHz M L S LS')
for k in sorted(d['M']):
    m=d['M'][k]
    print(k, f"{m:.1f} |", ' | '.join(f"{d[s].get(k,0):.1f}" for s in S[1:]), '|', ' '.join(f"{m/d[s][k]:.3f}" if d[s].get(k) else '-' for s in S[1:]), '|', ' '.join(str(d[s+'mhz'].get(k)) for s in S))
PY
