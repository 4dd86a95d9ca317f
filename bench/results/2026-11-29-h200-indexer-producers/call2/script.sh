#!/bin/bash
# Session 29 call 2: consumer-issued key tiles, 512 threads, 128 registers (B) against main (A).
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit-A mlakit-B gpu-tests-B; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
timeout 120 /tmp/b/gpu-tests-B --gtest_filter='OpsGpu.Indexer*:OpsGpu.GraphReplay*:OpsGpu.AppendIndexer*' > $W/tests.txt 2>&1
echo "rc $?" >> $W/tests.txt
grep -E "^\[  (PASSED|FAILED)|FAILED \]|^rc |Failure|error" $W/tests.txt | head -20
timeout 150 compute-sanitizer --tool racecheck /tmp/b/gpu-tests-B --gtest_filter='OpsGpu.IndexerLongCallsEqualCpu' > $W/race.txt 2>&1
echo "rc $?" >> $W/race.txt; tail -3 $W/race.txt; grep -m3 -A6 "Error\|Warning" $W/race.txt | head -30
B="--kernel auto --heads 64 --batch 1,32,128 --len 8192,32768,131072 --next-n 1,2 --replays 10 --settle-ms 300"
timeout 120 /tmp/b/mlakit-B bench-op indexer $B --json $W/ixB_v.json > $W/ixB_v.txt 2>&1
echo "verify FAIL/ERROR lines: $(grep -c -E 'FAIL|ERROR' $W/ixB_v.txt)"
for r in 1 2; do
  for side in A B B20; do
    bin=/tmp/b/mlakit-${side:0:1}; env=""
    [[ $side == B20 ]] && env="MLAKIT_IDX_STAGES=20"
    env $env timeout 100 $bin bench-op indexer $B --no-verify --json $W/ix_${side}_$r.json > $W/ix_${side}_$r.txt 2>&1
  done
done
for side in A B; do
  timeout 100 /tmp/b/mlakit-$side bench-op indexer --kernel auto --heads 128 --batch 32 --len 32768 --next-n 1,2,3,4 --replays 10 --settle-ms 300 --json $W/ix128_${side}.json > $W/ix128_${side}.txt 2>&1
done
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os
W=os.environ['OUT']+'/w'
def load(f):
    try: return {(r['batch'],r['len'],r['next_n'],r['heads']):r for r in json.load(open(f))['results'] if r.get('time_us')}
    except Exception as e: return {}
d={}
for side in ['A','B','B20']:
    rs=[load(f'{W}/ix_{side}_{r}.json') for r in (1,2)]+[load(f'{W}/ix128_{side}.json')]
    keys=set().union(*rs)
    d[side]={k:min(x[k]['time_us'] for x in rs if k in x) for k in keys}
    d[side+'mhz']={k:x[k].get('sm_mhz') for x in rs for k in x}
print('b len n h | A us | B us | B20 us | A/B | A/B20 | MHz A B')
for k in sorted(d['A']):
    a=d['A'][k]; b=d['B'].get(k); c=d['B20'].get(k)
    f=lambda v: f"{v:.1f}" if v else '-'
    r=lambda v: f"{a/v:.3f}" if v else '-'
    print(k, f(a),'|',f(b),'|',f(c),'|',r(b),'|',r(c),'|',d['Amhz'].get(k),d['Bmhz'].get(k))
PY
