#!/bin/bash
# Session 27 call 10: main's kernels (261f72e, G): the issue's grid at h_q 64 and 128, topk 2048.
set -u
mkdir -p /tmp/b /tmp/j && xz -dc .peers/ab/mlakit-G.xz > /tmp/b/mlakit-G && chmod +x /tmp/b/mlakit-G
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
cd /tmp/j
timeout 150 /tmp/b/mlakit-G bench --dtype fp8-blockwise --q-dtype bf16 --seq-len 8192 --pdl --settle-ms 200 --replays 20 --verify-requests 1 --backend auto --topk 2048 --heads 64,128 --s-q 1,2 --batch 1,8,32,64,128 --json wide.json > wide.txt 2>&1
python3 - <<'PY' > $OUT/summary.txt
import json, math
fm = {}
for line in open("/dev/stdin" if False else "/dev/null"): pass
rows = json.load(open("wide.json"))["results"]
for r in rows: print(r["h_q"], r["s_q"], r["batch"], r["tactic"], round(r["time_us"], 1), r["check"])
PY
cp wide.json wide.txt $OUT/
cat $OUT/summary.txt
