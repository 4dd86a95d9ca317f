#!/usr/bin/env bash
# Profiles the sm90 decode kernel on one problem with Nsight Compute (speed of light, warp
# states, SASS-level stall samples; the hottest instructions are printed).
# Usage on the GPU machine, after scripts/device-build.sh: scripts/profile-sm90.sh OUTDIR H S_Q BATCH LEN
set -uo pipefail
out=$1; h=$2; sq=$3; b=$4; len=$5
tag=h$h-s$sq-b$b-L$len
ncu --section SpeedOfLight --section WarpStateStats --section SourceCounters \
  --section MemoryWorkloadAnalysis --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
  -k regex:decode_kernel -c 1 -f -o "$out/$tag" \
  build-gpu/mlakit bench --heads "$h" --s-q "$sq" --batch "$b" --seq-len "$len" --pdl \
  --backend "${BK:-sm90:0}" --replays 1 --warmup 0 --no-verify >"$out/$tag.ncu.log" 2>&1
ncu -i "$out/$tag.ncu-rep" --page details >"$out/$tag.details.txt" 2>&1
grep -E "Duration|Throughput|Stall|Warp Cycles|Eligible|Issued|tensor_op|L2 Hit|Active Warps" "$out/$tag.details.txt" | head -40
ncu -i "$out/$tag.ncu-rep" --page source --csv --print-source sass >"$out/$tag.sass.csv" 2>/dev/null
python3 - "$out/$tag.sass.csv" <<'PY'
# The 25 SASS instructions with the most stall samples, with their top stall reason.
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
while rows and "Source" not in rows[0]:
    rows = rows[1:]  # ncu puts the kernel name first
if not rows:
    sys.exit("no SASS table in " + sys.argv[1])
col = {h: i for i, h in enumerate(rows[0])}
total = col["Warp Stall Sampling (All Samples)"]
stalls = [h for h in rows[0] if h.startswith("stall_") and "Not Issued" not in h]
data = [r for r in rows[1:] if len(r) == len(rows[0])]
all_samples = sum(float(r[total] or 0) for r in data) or 1.0
for r in sorted(data, key=lambda r: -float(r[total] or 0))[:25]:
    top = max(stalls, key=lambda h: float(r[col[h]] or 0))
    print(f"{100 * float(r[total] or 0) / all_samples:5.1f}%  {r[col['Source']][:80]:80s} {top}")
PY
