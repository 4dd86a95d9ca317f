#!/bin/bash
# Session 31 call 3: ncu durations of the decode and combine kernels of the persistent schedule
# (cache not flushed, clocks not locked), at the mid batches where it trails the cluster schedule.
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
run() { tag=$1; shift
  timeout 120 ncu --cache-control none --clock-control none -k regex:"decode|combine|plan" -c 6 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,launch__grid_size,launch__block_size \
    /tmp/b/mlakit bench --pdl --replays 1 --warmup 0 --no-verify "$@" > $W/$tag.log 2>&1
  echo "== $tag rc $?: $*"
  python3 - $W/$tag.log <<'PY'
import sys,re
name=None
for line in open(sys.argv[1]):
    m=re.match(r'\s+(\S*(decode|combine|plan)\S*)', line)
    if m and '(' in line: name=m.group(1)[:60]; continue
    m=re.match(r'\s+(gpu__time_duration.sum|dram__bytes_read.sum|dram__bytes_write.sum|lts__t_bytes.sum|launch__grid_size|launch__block_size)\s+(\S+)\s+(\S+)', line)
    if m and name: print(f"  {name:60s} {m.group(1):24s} {m.group(2):6s} {m.group(3)}")
PY
}
run f8_h128_b32_t0 --dtype fp8 --q-dtype fp8 --heads 128 --batch 32 --seq-len 4096 --backend sm90:0
run f8_h128_b32_t19 --dtype fp8 --q-dtype fp8 --heads 128 --batch 32 --seq-len 4096 --backend sm90:19
run f8_h128_b8_t0 --dtype fp8 --q-dtype fp8 --heads 128 --batch 8 --seq-len 4096 --backend sm90:0
run f8_h64_b32_t0 --dtype fp8 --q-dtype fp8 --heads 64 --batch 32 --seq-len 4096 --backend sm90:0
run bf_h128_b32_auto --heads 128 --batch 32 --seq-len 4096 --backend auto
tar czf $OUT/all.tgz -C $OUT w
