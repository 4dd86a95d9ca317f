#!/bin/bash
# Nsight Compute on the sparse mma kernel (cluster schedule, tactic 13), h_q 16, s_q 1, batch 128,
# topk 2048: HEAD 23fb7c1 (B) and the two-group branch (G). Stall reasons, pipe use, hot SASS.
set -u
mkdir -p /tmp/b /tmp/p && for f in mlakit-B mlakit-G; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
export PATH=/usr/local/cuda/bin:$PATH
which ncu > $OUT/ncu.txt 2>&1 || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu >> $OUT/ncu.txt 2>&1
cd /tmp/p
for v in B G; do
  timeout 200 ncu --section SpeedOfLight --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,smsp__inst_executed.avg.per_cycle_active \
    -k regex:sparse_mma -c 1 -f -o $v \
    /tmp/b/mlakit-$v bench --dtype fp8-blockwise --q-dtype bf16 --seq-len 8192 --topk 2048 --heads 16 --s-q 1 --batch 128 --pdl \
    --backend sm90:13 --replays 1 --warmup 0 --no-verify > $v.log 2>&1
  ncu -i $v.ncu-rep --page details > $v.details.txt 2>&1
  ncu -i $v.ncu-rep --page source --csv --print-source sass > $v.sass.csv 2>/dev/null
  python3 - $v.sass.csv <<'PY' > $v.hot.txt
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
while rows and "Source" not in rows[0]: rows = rows[1:]
col = {h: i for i, h in enumerate(rows[0])}
total = col["Warp Stall Sampling (All Samples)"]
stalls = [h for h in rows[0] if h.startswith("stall_") and "Not Issued" not in h]
data = [r for r in rows[1:] if len(r) == len(rows[0])]
alls = sum(float(r[total] or 0) for r in data) or 1.0
agg = collections.Counter()
for r in data:
  for h in stalls: agg[h] += float(r[col[h]] or 0)
print("stall reasons (share of all samples):")
for h, v in agg.most_common(12): print(f"  {100*v/alls:5.1f}% {h}")
print("hottest 30 SASS:")
for r in sorted(data, key=lambda r: -float(r[total] or 0))[:30]:
  top = max(stalls, key=lambda h: float(r[col[h]] or 0))
  print(f"{100 * float(r[total] or 0) / alls:5.1f}%  {r[col['Source']][:70]:70s} {top}")
PY
done
for v in B G; do echo "== $v"; grep -E "Duration|Throughput|Warp Cycles Per Issued|Issued Warp|Eligible|No Eligible|pipe_tensor|pipe_lsu|inst_executed.avg.per_cycle|Issue Slots Busy|Executed Ipc" $v.details.txt | head -30; cat $v.hot.txt; done > $OUT/profile.txt
tar cf $OUT/details.tar *.details.txt *.log
cat $OUT/profile.txt | head -150
