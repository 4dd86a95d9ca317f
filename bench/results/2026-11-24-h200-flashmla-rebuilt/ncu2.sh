#!/bin/bash
# Stall reasons per issued instruction and tensor-pipe activity, one decode launch each.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
M="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__cycles_active.avg"
timeout 200 ncu --clock-control none --launch-skip 10 --launch-count 1 -k regex:flash_fwd_splitkv_mla_kernel $M .bin/fmla_bench38 128 64 4096 0.05 > $OUT/ncu2-fmla.txt 2>&1; echo fmla rc $?
timeout 200 ncu --clock-control none --launch-skip 10 --launch-count 1 -k regex:decode_kernel $M .bin/mlakit bench --heads 128 --batch 64 --seq-len 4096 --pdl --no-verify --backend sm90:0 --replays 1 --warmup 1 > $OUT/ncu2-main.txt 2>&1; echo main rc $?
timeout 200 ncu --clock-control none --launch-skip 10 --launch-count 1 -k regex:decode_kernel $M .bin/mlakit-pairs bench --heads 128 --batch 64 --seq-len 4096 --pdl --no-verify --backend sm90:6 --replays 1 --warmup 1 > $OUT/ncu2-pairs.txt 2>&1; echo pairs rc $?
python3 - $OUT <<'PY'
import sys,re
out=sys.argv[1]; d={}
for f in ('fmla','main','pairs'):
    for l in open(f'{out}/ncu2-{f}.txt'):
        m=re.match(r'\s+(\S+)\s+(\S+)?\s+([\d,.]+)\s*$', l)
        if m and ('stalled' in m.group(1) or 'gmma' in m.group(1) or 'inst_executed' in m.group(1) or 'cycles' in m.group(1)):
            d.setdefault(m.group(1),{})[f]=float(m.group(3).replace(',',''))
for k in sorted(d, key=lambda k: -d[k].get('main',0)):
    v=d[k]
    if max(v.values())<0.05: continue
    name=k.replace('smsp__average_warps_issue_stalled_','stall ').replace('_per_issue_active.ratio','')
    print(f"{name:60s} " + " ".join(f"{v.get(f,0):12.3f}" for f in ('fmla','main','pairs')))
PY
