#!/bin/bash
# Nsight Compute on the sparse mma kernel (cluster schedule, tactic 13), h_q 16, s_q 1, batch 128,
# topk 2048: main a6f7ea0 and D (the fp16 mma kernel, session 27 call 4). Stall reasons, pipe use, hot SASS.
set -u
mkdir -p /tmp/b /tmp/p && for f in mlakit-main mlakit-D; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
export PATH=/usr/local/cuda/bin:$PATH
which ncu > $OUT/ncu.txt 2>&1 || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu >> $OUT/ncu.txt 2>&1
cd /tmp/p
for v in main D; do
  timeout 200 ncu --section SpeedOfLight --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section InstructionStats --metrics regex:sm__inst_executed_pipe_.*avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.avg.per_cycle_active \
    -k regex:sparse_mma -c 1 -f -o $v \
    /tmp/b/mlakit-$v bench --dtype fp8-blockwise --q-dtype bf16 --seq-len 8192 --topk 2048 --heads 16 --s-q 1 --batch 128 --pdl \
    --backend sm90:13 --replays 1 --warmup 0 --no-verify > $v.log 2>&1
  if [[ ! -f $v.ncu-rep ]]; then
    echo "regex metrics refused; without them" >> $OUT/ncu.txt
    timeout 200 ncu --section SpeedOfLight --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis \
      --section InstructionStats -k regex:sparse_mma -c 1 -f -o $v \
      /tmp/b/mlakit-$v bench --dtype fp8-blockwise --q-dtype bf16 --seq-len 8192 --topk 2048 --heads 16 --s-q 1 --batch 128 --pdl \
      --backend sm90:13 --replays 1 --warmup 0 --no-verify > $v.log 2>&1
  fi
  ncu -i $v.ncu-rep --page details > $v.details.txt 2>&1
  ncu -i $v.ncu-rep --page raw --csv > $v.raw.csv 2>/dev/null
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
for v in main D; do echo "== $v"; grep -E "Duration|Throughput|Warp Cycles Per Issued|Issued Warp|Eligible|No Eligible|pipe_|inst_executed.avg.per_cycle|Issue Slots Busy|Executed Ipc|SM Frequency" $v.details.txt | head -60; cat $v.hot.txt; done > $OUT/profile.txt
python3 - > $OUT/pipes.txt <<'PY'
import csv
for v in ("main", "D"):
  try:
    rows = list(csv.reader(open(f"{v}.raw.csv")))
    h, vals = rows[0], rows[2] if len(rows) > 2 else rows[1]
    print("==", v)
    for i, name in enumerate(h):
      if "inst_executed_pipe" in name or "hmma" in name: print(f"  {name} {vals[i]}")
  except Exception as e: print(v, e)
PY
cat $OUT/pipes.txt >> $OUT/profile.txt
tar cf $OUT/details.tar *.details.txt *.log
cat $OUT/profile.txt | head -150
