#!/bin/bash
# Session 29 call 6: the whole GPU suite at c6c8550 (enable_pdl on the ops, its chain test), a
# memcheck of that test, and bench-op with and without --pdl.
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit-P gpu-tests-P; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
timeout 330 /tmp/b/gpu-tests-P > $W/suite.txt 2>&1
echo "rc $?" >> $W/suite.txt
grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED \]|^rc " $W/suite.txt | head -20
timeout 90 compute-sanitizer --tool memcheck /tmp/b/gpu-tests-P --gtest_filter='OpsGpu.PdlChainEqualsPlainChain' > $W/memcheck.txt 2>&1
echo "rc $?" >> $W/memcheck.txt; grep -E "ERROR SUMMARY|PASSED|FAILED|^rc" $W/memcheck.txt | head -5
C="--replays 10 --settle-ms 200 --no-verify"
for side in off on; do
  p=""; [[ $side == on ]] && p="--pdl"
  timeout 60 /tmp/b/mlakit-P bench-op indexer --heads 64 --batch 1,32 --len 8192,32768,131072 --next-n 1,2 $C $p --json $W/ix_$side.json > $W/ix_$side.txt 2>&1
  timeout 60 /tmp/b/mlakit-P bench-op topk --batch 1,32,64 --len 32768,131072 --k 2048 $C $p --json $W/tk_$side.json > $W/tk_$side.txt 2>&1
  timeout 60 /tmp/b/mlakit-P bench-op append --layout v32 --batch 1,64 $C $p --json $W/ap_$side.json > $W/ap_$side.txt 2>&1
  timeout 60 /tmp/b/mlakit-P bench-op append --layout indexer --batch 1,64 $C $p --json $W/ai_$side.json > $W/ai_$side.txt 2>&1
done
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os
W=os.environ['OUT']+'/w'
def load(f):
    try: return {(r['batch'],r['len'],r['next_n'],r.get('variant','')):r for r in json.load(open(f))['results'] if r.get('time_us')}
    except Exception as e: return {}
print('op b len n | off us | on us | off/on')
for op in ['ix','tk','ap','ai']:
    a=load(f'{W}/{op}_off.json'); b=load(f'{W}/{op}_on.json')
    for k in sorted(a):
        if k in b: print(op, k[:3], f"{a[k]['time_us']:.2f} | {b[k]['time_us']:.2f} | {a[k]['time_us']/b[k]['time_us']:.3f}", b[k].get('kernel',''))
PY
