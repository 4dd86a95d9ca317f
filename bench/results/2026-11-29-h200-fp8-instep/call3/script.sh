#!/bin/bash
# Session 30 call 3: ncu of the out-of-phase wide tile (sm90:0) and the in-step tile (sm90:19),
# e4m3 cache and q, h_q 128, s_q 1, batch 64, L 4096: speed of light, warp states, pipes, and the
# SASS lines with the most stall samples.
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
for t in 0 19; do
  timeout 200 ncu --section SpeedOfLight --section WarpStateStats --section SourceCounters \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats \
    --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,sm__cycles_elapsed.avg \
    -k regex:decode_kernel -c 1 -f -o $W/t$t \
    /tmp/b/mlakit bench --dtype fp8 --q-dtype fp8 --heads 128 --batch 64 --seq-len 4096 --pdl \
    --backend sm90:$t --replays 1 --warmup 0 --no-verify > $W/t$t.ncu.log 2>&1
  echo "ncu t$t rc $?"
  ncu -i $W/t$t.ncu-rep --page details > $W/t$t.details.txt 2>&1
  ncu -i $W/t$t.ncu-rep --page source --csv --print-source sass > $W/t$t.sass.csv 2>/dev/null
  rm -f $W/t$t.ncu-rep
done
tar czf $OUT/all.tgz -C $OUT w
for t in 0 19; do
  echo "== tactic $t"
  grep -E "Duration|Elapsed Cycles|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Issued Warp|No Eligible|Warp Cycles Per Issued|gmma|inst_executed|wavefronts_mem_shared|Shared Memory|L1/TEX Hit" $W/t$t.details.txt | head -24
  python3 - $W/t$t.sass.csv <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
while rows and "Source" not in rows[0]:
    rows = rows[1:]
if not rows: sys.exit("no SASS table")
col = {h: i for i, h in enumerate(rows[0])}
total = col["Warp Stall Sampling (All Samples)"]
stalls = [h for h in rows[0] if h.startswith("stall_") and "Not Issued" not in h]
data = [r for r in rows[1:] if len(r) == len(rows[0])]
alls = sum(float(r[total] or 0) for r in data) or 1.0
for r in sorted(data, key=lambda r: -float(r[total] or 0))[:16]:
    top = max(stalls, key=lambda h: float(r[col[h]] or 0))
    print(f"{100*float(r[total] or 0)/alls:5.1f}% {r[col['Address']] if 'Address' in col else ''} {r[col['Source']][:70]:70s} {top}")
PY
done
