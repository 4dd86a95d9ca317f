#!/bin/bash
# Session 31 call 9: paired persistent parts, fixed (a paired request's slot only in its two parts):
# GPU tests, sanitizers, then A/B in one run (MLAKIT_PAIR_PARTS=0: the persistent grid unpaired).
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit mlakit_gpu_tests; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
timeout 240 /tmp/b/mlakit_gpu_tests --gtest_filter='*PairedParts*:Sm90.*:Sm90Graph*:Sm90Pdl*:GpuLse*:GpuViews*:VarQGpu*:Sm80.*:Sm90Fp8Graph*:Sm90Fp8Pdl*:CorruptBlockTable*' > $W/tests.txt 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED \]" $W/tests.txt | head -20
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool /tmp/b/mlakit_gpu_tests --gtest_filter='Sm90Sanitize.Small:Sm90Sanitize.Fp8' > $W/san_$tool.txt 2>&1
  echo "$tool rc $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/san_$tool.txt | tail -1) $(grep -E '^\[  (PASSED|FAILED)' $W/san_$tool.txt)"
done
MLAKIT_PAIR_DEBUG=1 /tmp/b/mlakit bench --dtype fp8 --q-dtype fp8 --heads 128,64 --batch 32 --seq-len 4096 --backend sm90:0 --no-verify --replays 1 2>&1 | grep pair | sort | uniq -c
B="--pdl --settle-ms 300 --verify-requests 1"
for v in 1 0; do
  MLAKIT_PAIR_PARTS=$v timeout 120 /tmp/b/mlakit bench $B --dtype fp8 --q-dtype fp8 --heads 128,64 --batch 8,32,64 --seq-len 4096 --var 0,1 \
    --backend sm90:0,sm90:19 --json $W/f8_p$v.json > $W/f8_p$v.txt 2>&1; echo "f8 p$v rc $?"
  MLAKIT_PAIR_PARTS=$v timeout 90 /tmp/b/mlakit bench $B --heads 128,64 --batch 8,32,64 --seq-len 4096 --var 0,1 \
    --backend sm90:0 --json $W/bf_p$v.json > $W/bf_p$v.txt 2>&1; echo "bf p$v rc $?"
done
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os
W=os.environ['OUT']+'/w'
rows={}
for f in ('f8','bf'):
    for v in (1,0):
        try: d=json.load(open(f'{W}/{f}_p{v}.json'))['results']
        except Exception as e: print('no json',f,v,e); continue
        for r in d:
            rows.setdefault((f,r['h_q'],r['batch'],int(r['var']),r['tactic']),{})[v]=(r['time_us'],r['check'][:2])
print('kind h_q b var tactic | unpaired paired | unpaired/paired')
for k in sorted(rows):
    x=rows[k]; a=x.get(0,(0,''))[0]; b=x.get(1,(0,''))[0]
    print(k, f'{a:.1f} {b:.1f} |', f'{a/b:.3f}' if a and b else '-', set(c for _,c in x.values()))
PY
