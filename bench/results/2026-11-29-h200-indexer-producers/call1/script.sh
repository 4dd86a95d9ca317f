#!/bin/bash
# Session 29 call 1: consumer-issued key tiles in the persistent indexer kernel (B) against main (A).
set -u
mkdir -p /tmp/b
for f in mlakit-A mlakit-B gpu-tests-B; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 120 /tmp/b/gpu-tests-B --gtest_filter='OpsGpu.Indexer*:OpsGpu.GraphReplay*:OpsGpu.AppendIndexer*' > $OUT/tests.txt 2>&1
echo "rc $?" >> $OUT/tests.txt
grep -E "^\[  (PASSED|FAILED)|FAILED \]|^rc " $OUT/tests.txt | head
timeout 150 compute-sanitizer --tool racecheck /tmp/b/gpu-tests-B --gtest_filter='OpsGpu.IndexerLongCallsEqualCpu' > $OUT/race.txt 2>&1
echo "rc $?" >> $OUT/race.txt; tail -3 $OUT/race.txt
B="--kernel auto --heads 64 --batch 1,32,128 --len 8192,32768,131072 --next-n 1,2 --replays 10 --settle-ms 300"
timeout 120 /tmp/b/mlakit-B bench-op indexer $B --json $OUT/ixB_v.json > $OUT/ixB_v.txt 2>&1
grep -c FAIL $OUT/ixB_v.txt
for r in 1 2; do
  for side in A B B20; do
    bin=/tmp/b/mlakit-${side:0:1}; env=""
    [[ $side == B20 ]] && env="MLAKIT_IDX_STAGES=20"
    env $env timeout 100 $bin bench-op indexer $B --no-verify --json $OUT/ix_${side}_$r.json > $OUT/ix_${side}_$r.txt 2>&1
  done
done
python3 - <<'PY'
import json,os,glob
O=os.environ['OUT']
def load(f):
    try: return {(r['batch'],r['len'],r['next_n']):r for r in json.load(open(f))['results']}
    except Exception as e: return {}
d={}
for side in ['A','B','B20']:
    rs=[load(f'{O}/ix_{side}_{r}.json') for r in (1,2)]
    d[side]={k:min(x[k]['time_us'] for x in rs if k in x) for k in set().union(*rs)}
    d[side+'mhz']={k:rs[-1][k].get('sm_mhz') for k in rs[-1]} if rs[-1] else {}
print('b len n | A us | B us | B20 us | A/B | A/B20 | MHz A B')
for k in sorted(d['A']):
    a=d['A'][k]; b=d['B'].get(k,float('nan')); c=d['B20'].get(k,float('nan'))
    print(k, f"{a:.1f} | {b:.1f} | {c:.1f} | {a/b:.3f} | {a/c:.3f} | {d['Amhz'].get(k)} {d['Bmhz'].get(k)}")
PY
