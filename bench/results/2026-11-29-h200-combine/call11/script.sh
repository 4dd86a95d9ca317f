#!/bin/bash
# Session 31 call 11: the combine with a row a warp (one split lane): tests that split, memcheck,
# then A/B in one run (MLAKIT_COMBINE_WARP=0: a row a CTA, as at c9c909a) and ncu durations.
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit mlakit_gpu_tests; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
timeout 200 /tmp/b/mlakit_gpu_tests --gtest_filter='Sm90.*:Sm80.*:Sm90Graph*:Sm90Pdl*:Sm80Graph*:Sm80Pdl*:GpuLse*:GpuViews*:VarQGpu*:CorruptBlockTable*:CpMergeGpu*:Sm90Fp8.Sweep:Sm90Fp8Graph*' > $W/tests.txt 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED \]" $W/tests.txt | head
timeout 100 compute-sanitizer --tool memcheck /tmp/b/mlakit_gpu_tests --gtest_filter='Sm90Sanitize.Small:Sm80Sanitize.*' > $W/memcheck.txt 2>&1
echo "memcheck rc $?: $(grep -E 'ERROR SUMMARY' $W/memcheck.txt | tail -1) $(grep -E '^\[  (PASSED|FAILED)' $W/memcheck.txt)"
B="--pdl --settle-ms 300 --verify-requests 1"
for v in 0 1; do
  MLAKIT_COMBINE_WARP=$v timeout 90 /tmp/b/mlakit bench $B --dtype fp8 --q-dtype fp8 --heads 128,64 --batch 1,8,32,128 --seq-len 4096 \
    --backend sm90:0 --json $W/f8_w$v.json > $W/f8_w$v.txt 2>&1
  MLAKIT_COMBINE_WARP=$v timeout 90 /tmp/b/mlakit bench $B --heads 128,64,16 --batch 1,8,32,128 --seq-len 4096 \
    --backend auto --json $W/bf_w$v.json > $W/bf_w$v.txt 2>&1
  MLAKIT_COMBINE_WARP=$v timeout 60 /tmp/b/mlakit bench $B --heads 128 --batch 32 --seq-len 4096 --var 1 \
    --backend auto --json $W/rg_w$v.json > $W/rg_w$v.txt 2>&1
  echo "w$v done"
  for b in 8 32; do
    MLAKIT_COMBINE_WARP=$v timeout 60 ncu --cache-control none --clock-control none -k regex:combine -c 2 --metrics gpu__time_duration.sum,sm__inst_executed.sum \
      /tmp/b/mlakit bench --pdl --replays 1 --warmup 0 --no-verify --dtype fp8 --q-dtype fp8 --heads 128 --batch $b --seq-len 4096 --backend sm90:0 > $W/ncu_w${v}_b$b.log 2>&1
    echo "ncu w$v b$b: $(grep -E 'gpu__time_duration|sm__inst_executed' $W/ncu_w${v}_b$b.log | awk '{print $1, $3}' | tr '\n' ' ')"
  done
done
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os
W=os.environ['OUT']+'/w'
rows={}
for f in ('f8','bf','rg'):
    for v in (0,1):
        try: d=json.load(open(f'{W}/{f}_w{v}.json'))['results']
        except Exception as e: print('no json',f,v,e); continue
        for r in d:
            rows.setdefault((f,r['h_q'],r['batch'],int(r['var']),r['backend']+':'+str(r['tactic'])),{})[v]=(r['time_us'],r['check'][:2])
print('kind h_q b var backend | row a CTA | row a warp | ratio')
for k in sorted(rows):
    x=rows[k]; a=x.get(0,(0,''))[0]; b=x.get(1,(0,''))[0]
    print(k, f'{a:.1f} {b:.1f} |', f'{a/b:.3f}' if a and b else '-', set(c for _,c in x.values()))
PY
