#!/bin/bash
# Session 31 call 8: paired persistent parts (clusters of two, DSMEM merge of a request cut into
# the pair's two parts) and the combine with 32-bit item math: GPU tests, sanitizers, a bench.
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit mlakit_gpu_tests; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
timeout 240 /tmp/b/mlakit_gpu_tests --gtest_filter='*PairedParts*:Sm90.*:Sm90Graph*:Sm90Pdl*:GpuLse*:GpuViews*:VarQGpu*:Sm80.*:Sm90Fp8Graph*:Sm90Fp8Pdl*:CorruptBlockTable*' > $W/tests.txt 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED \]" $W/tests.txt | head -20
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool /tmp/b/mlakit_gpu_tests --gtest_filter='Sm90Sanitize.Small:Sm90Sanitize.Fp8' > $W/san_$tool.txt 2>&1
  echo "$tool rc $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/san_$tool.txt | tail -1) $(grep -E '^\[  (PASSED|FAILED)' $W/san_$tool.txt)"
done
B="--pdl --settle-ms 300 --verify-requests 1"
timeout 120 /tmp/b/mlakit bench $B --dtype fp8 --q-dtype fp8 --heads 128,64 --batch 8,32,64 --seq-len 4096 --var 0,1 \
  --backend sm90:0,sm90:19,sm90:2 --json $W/f8.json > $W/f8.txt 2>&1; echo "f8 rc $?"
timeout 90 /tmp/b/mlakit bench $B --heads 128,64 --batch 8,32,64 --seq-len 4096 --var 0,1 \
  --backend sm90:0,sm90:2 --json $W/bf.json > $W/bf.txt 2>&1; echo "bf rc $?"
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os
W=os.environ['OUT']+'/w'
for f in ('f8','bf'):
    try: d=json.load(open(f'{W}/{f}.json'))['results']
    except Exception as e: print('no json',f,e); continue
    rows={}
    for r in d:
        rows.setdefault((r['h_q'],r['batch'],int(r['var'])),{})[r['tactic']]=(r['time_us'],r['check'][:2])
    print(f, 'h_q b var | tactics')
    for k in sorted(rows): print(' ',k, {t:round(v[0],1) for t,v in sorted(rows[k].items())}, set(v[1] for v in rows[k].values()))
PY
