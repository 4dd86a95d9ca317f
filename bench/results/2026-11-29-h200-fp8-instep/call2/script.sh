#!/bin/bash
# Session 30 call 2: the in-step wide tile (tactics 19-21; e4m3 cache and q): GPU tests, then
# bench against the out-of-phase wide tile (0-2) in one run.
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit mlakit_gpu_tests; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
timeout 300 /tmp/b/mlakit_gpu_tests --gtest_filter='Sm90Fp8*:Tuner*:Tune*' > $W/tests.txt 2>&1
echo "rc $?" >> $W/tests.txt
grep -E "^\[  (PASSED|FAILED)|FAILED \]|^rc |Failure" $W/tests.txt | head -30
for h in 128 64; do
  timeout 150 /tmp/b/mlakit bench --dtype fp8 --q-dtype fp8 --heads $h --s-q 1,2 --batch 1,8,32,64,128 \
    --seq-len 4096 --pdl --settle-ms 300 --verify-requests 2 \
    --backend sm90:0,sm90:19,sm90:2,sm90:21 --json $W/b_h$h.json > $W/b_h$h.txt 2>&1
  echo "bench h$h rc $?"
done
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os
W=os.environ['OUT']+'/w'
rows={}
for h in (128,64):
    try: d=json.load(open(f'{W}/b_h{h}.json'))
    except Exception as e: print('no json',h,e); continue
    for r in d['results']:
        k=(r.get('h_q'),r.get('s_q'),r.get('batch'))
        rows.setdefault(k,{})[f"{r.get('backend')}:{r.get('tactic')}"]=(r.get('time_us'),r.get('check','')+' '+r.get('note',''),r.get('sm_mhz'))
print('h_q s_q b | sm90:0 | sm90:19 | 0/19 | sm90:2 | sm90:21 | 2/21')
for k in sorted(rows):
    v=rows[k]
    g=lambda b: v.get(b,(None,None,None))
    t0,t19,t2,t21=[g(b)[0] for b in ('sm90:0','sm90:19','sm90:2','sm90:21')]
    f=lambda x: f'{x:.1f}' if x else '-'
    r=lambda a,b: f'{a/b:.2f}' if a and b else '-'
    print(k,f(t0),f(t19),r(t0,t19),f(t2),f(t21),r(t2,t21), [g(b)[1] for b in ('sm90:19','sm90:21')])
PY
