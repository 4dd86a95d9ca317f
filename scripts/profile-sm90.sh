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
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
if not rows: sys.exit()
head = rows[0]
def col(name):
    for i, h in enumerate(head):
        if h.strip() == name: return i
    return None
src = col("Source"); total = col("Warp Stall Sampling (All Samples)")
if src is None or total is None:
    print(head); sys.exit()
data = []
for r in rows[1:]:
    try: data.append((float(r[total] or 0), r[src]))
    except (ValueError, IndexError): pass
s = sum(d[0] for d in data) or 1
for v, text in sorted(data, reverse=True)[:25]:
    print(f"{100*v/s:5.1f}% {text[:110]}")
PY
