#!/bin/bash
# Session 30 call 8: the in-step wide tile as committed (tactics 19-21, first for an e4m3 q from
# 128 query tiles past 2048 tokens): GPU tests over every tactic of the fp8 suites, var_q, LSE,
# views, graphs and PDL; compute-sanitizer on Sm90Sanitize.Fp8; the standard grid at h_q 64 and
# 128, s_q 1 and 2, e4m3 q and cache, auto against tactic 0 (the previous default there), with
# FlashMLA bf16's settled times (shared/reference/flashmla_settled_h200.csv) as the reference.
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit mlakit_gpu_tests; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
timeout 300 /tmp/b/mlakit_gpu_tests --gtest_filter='Sm90Fp8*:Tune*:Tuner*:VarQGpu.*:GpuLse.*:GpuViews.*:Sm90Graph*:Sm90Pdl*' > $W/tests.txt 2>&1
echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED \]|SKIPPED \]|Failure" $W/tests.txt | head -20
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 3 /tmp/b/mlakit_gpu_tests \
    --gtest_filter='Sm90Sanitize.Fp8' --gtest_brief=1 > $W/san_$tool.txt 2>&1
  echo "$tool rc $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' $W/san_$tool.txt | tr '\n' ' ')"
done
timeout 330 /tmp/b/mlakit bench --dtype fp8 --q-dtype fp8 --grid standard --heads 64,128 --s-q 1,2 \
  --pdl --settle-ms 300 --verify-requests 1 --backend auto,sm90:0 \
  --reference .peers/ab/ref.csv --json $W/grid.json > $W/grid.txt 2>&1
echo "grid rc $?"
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os,math
W=os.environ['OUT']+'/w'
d=json.load(open(f'{W}/grid.json'))
ref={}
for line in open('.peers/ab/ref.csv'):
    if line[0].isdigit():
        h,s,b,L,v,f,*_=line.strip().split(','); ref[(int(h),int(s),int(b),int(L))]=float(f)
rows={}
for r in d['results']:
    k=(r['h_q'],r['s_q'],r['batch'],r['seq_len'])
    rows.setdefault(k,{})['auto' if r['backend'].startswith('auto') else 'sm90:0']=(r['time_us'],r.get('tactic'),r.get('check',''))
g={}
print('h_q s_q b L | auto us (tactic) | sm90:0 us | 0/auto | FlashMLA us | FlashMLA/auto')
for k in sorted(rows):
    a=rows[k].get('auto'); z=rows[k].get('sm90:0'); f=ref.get(k)
    if not a: continue
    print(k, f"{a[0]:.1f} ({a[1]})", f"{z[0]:.1f}" if z else '-', f"{z[0]/a[0]:.3f}" if z else '-', f if f else '-', f"{f/a[0]:.3f}" if f else '-', a[2][:12])
    if f: g.setdefault(k[0],[]).append(f/a[0])
for h,v in g.items(): print('geomean FlashMLA/auto h_q',h, round(math.exp(sum(map(math.log,v))/len(v)),3), len(v))
PY
