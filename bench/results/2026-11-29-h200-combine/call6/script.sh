#!/bin/bash
# Session 31 call 6: the combine kernel with 32-bit item math (request and row from the metadata
# lane): GPU tests that split, memcheck, then base (f0bc19d's combine) against the new kernel's
# variants (MLAKIT_COMBINE_VARIANT 0: one row at a time as before, 1: combine_rows 2 x 4), ncu.
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit mlakit-base; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
: timeout 200 /tmp/b/mlakit_gpu_tests --gtest_filter='Sm90.*:Sm80.*:Sm90Graph*:Sm90Pdl*:Sm80Graph*:Sm80Pdl*:GpuLse*:GpuViews*:VarQGpu*:CorruptBlockTable*:Sm90Sanitize*:Sm80Sanitize*:CpMergeGpu*:Sm90Fp8Graph*' > $W/tests.txt 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED \]" $W/tests.txt | head
: timeout 120 compute-sanitizer --tool memcheck /tmp/b/mlakit_gpu_tests --gtest_filter='Sm90Sanitize.*:Sm80Sanitize.*' > $W/memcheck.txt 2>&1
echo "memcheck rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $W/memcheck.txt | head -4
bench() { tag=$1; shift
  "$@" bench --dtype fp8 --q-dtype fp8 --heads 128,64 --batch 1,8,32,128 --seq-len 4096 \
    --backend sm90:0 --pdl --settle-ms 300 --verify-requests 1 --json $W/${tag}_f8.json > $W/${tag}_f8.txt 2>&1
  "$@" bench --heads 128,64,16 --batch 1,8,32,128 --seq-len 4096 \
    --backend auto --pdl --settle-ms 300 --verify-requests 1 --json $W/${tag}_bf.json > $W/${tag}_bf.txt 2>&1
  echo "$tag done"
}
bench base timeout 90 /tmp/b/mlakit-base
MLAKIT_COMBINE_VARIANT=0 bench v0 timeout 90 /tmp/b/mlakit
MLAKIT_COMBINE_VARIANT=1 bench v1 timeout 90 /tmp/b/mlakit
for v in base v0 v1; do
  bin=/tmp/b/mlakit; [ $v = base ] && bin=/tmp/b/mlakit-base
  MLAKIT_COMBINE_VARIANT=${v#v} timeout 60 ncu --cache-control none --clock-control none -k regex:combine -c 2 --metrics gpu__time_duration.sum,sm__inst_executed.sum \
    $bin bench --pdl --replays 1 --warmup 0 --no-verify --dtype fp8 --q-dtype fp8 --heads 128 --batch 32 --seq-len 4096 --backend sm90:0 > $W/ncu_$v.log 2>&1
  echo "ncu $v: $(grep -E 'gpu__time_duration|sm__inst_executed' $W/ncu_$v.log | awk '{print $1, $3}' | tr '\n' ' ')"
done
tar czf $OUT/all.tgz -C $OUT w
python3 - <<'PY'
import json,os
W=os.environ['OUT']+'/w'
rows={}
for v in ('base','v0','v1'):
    for t in ('f8','bf'):
        try: d=json.load(open(f'{W}/{v}_{t}.json'))['results']
        except Exception as e: print('no json',v,t,e); continue
        for r in d:
            k=(t,r['h_q'],r['batch'],r['backend']+':'+str(r['tactic']))
            rows.setdefault(k,{})[v]=(r['time_us'],r['check'][:2])
print('kind h_q b backend | base v0 v1 | base/v0 base/v1')
for k in sorted(rows):
    x=rows[k]; t=[x.get(v,(0,''))[0] for v in ('base','v0','v1')]
    print(k,' '.join(f'{a:.1f}' for a in t),'|',' '.join(f'{t[0]/a:.3f}' if a else '-' for a in t[1:]), set(c for _,c in x.values()))
PY
