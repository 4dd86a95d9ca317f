#!/bin/bash
# Session 31 call 4: the combine kernel taking rows two at a time with four splits each loaded at
# once (combine_rows); GPU tests that split, then the variants A/B (MLAKIT_COMBINE_VARIANT: 0 the
# old kernel, 1 rows 2 x splits 4, 2 rows 4 x splits 2, 3 rows 1 x splits 8), then ncu durations.
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit mlakit_gpu_tests; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
timeout 200 /tmp/b/mlakit_gpu_tests --gtest_filter='Sm90.*:Sm80.*:Sm90Graph*:Sm90Pdl*:Sm80Graph*:Sm80Pdl*:GpuLse*:GpuViews*:VarQGpu*:CorruptBlockTable*:Sm90Sanitize*:Sm80Sanitize*:CpMergeGpu*' > $W/tests.txt 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED \]|SKIPPED \]" $W/tests.txt | head
timeout 120 compute-sanitizer --tool memcheck /tmp/b/mlakit_gpu_tests --gtest_filter='Sm90Sanitize.*:Sm80Sanitize.*' > $W/memcheck.txt 2>&1
echo "memcheck rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $W/memcheck.txt | head -4
for v in 0 1 2 3; do
  MLAKIT_COMBINE_VARIANT=$v timeout 60 /tmp/b/mlakit bench --dtype fp8 --q-dtype fp8 --heads 128,64 --batch 8,32 --seq-len 4096 \
    --backend sm90:0 --pdl --settle-ms 300 --verify-requests 1 --json $W/v${v}_f8.json > $W/v${v}_f8.txt 2>&1
  MLAKIT_COMBINE_VARIANT=$v timeout 60 /tmp/b/mlakit bench --heads 128,64,16 --batch 8,32 --seq-len 4096 \
    --backend auto --pdl --settle-ms 300 --verify-requests 1 --json $W/v${v}_bf.json > $W/v${v}_bf.txt 2>&1
  echo "variant $v done"
done
for v in 0 1; do
  MLAKIT_COMBINE_VARIANT=$v timeout 60 ncu --cache-control none --clock-control none -k regex:combine -c 2 --metrics gpu__time_duration.sum \
    /tmp/b/mlakit bench --pdl --replays 1 --warmup 0 --no-verify --dtype fp8 --q-dtype fp8 --heads 128 --batch 32 --seq-len 4096 --backend sm90:0 > $W/ncu_v$v.log 2>&1
  echo "ncu v$v: $(grep gpu__time_duration $W/ncu_v$v.log | awk '{print $3}' | tr '\n' ' ')"
done
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os
W=os.environ['OUT']+'/w'
rows={}
for v in range(4):
    for t in ('f8','bf'):
        try: d=json.load(open(f'{W}/v{v}_{t}.json'))['results']
        except Exception as e: print('no json',v,t,e); continue
        for r in d:
            k=(t,r['h_q'],r['batch'],r['backend']+':'+str(r['tactic']))
            rows.setdefault(k,{})[v]=(r['time_us'],r['check'][:2])
print('kind h_q b backend | v0 v1 v2 v3 | v0/v1 v0/v2 v0/v3')
for k in sorted(rows):
    x=rows[k]; t=[x.get(v,(0,''))[0] for v in range(4)]
    print(k,' '.join(f'{a:.1f}' for a in t),'|',' '.join(f'{t[0]/a:.3f}' if a else '-' for a in t[1:]), set(c for _,c in x.values()))
PY
