#!/bin/bash
# Session 27 call 7: main at 22a658a (F). The sparse, tune, graph and PDL GPU tests, memcheck and
# racecheck of the sparse sweep, and auto on the rows whose order changed (h_q 64 and 128, 32 of
# the mma kernel's tiles, topk 2048).
set -u
mkdir -p /tmp/b /tmp/j
for f in mlakit-F gpu-tests-F; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 200 /tmp/b/gpu-tests-F --gtest_filter='Sm90Sparse.*:Sm80Sparse.*:Tune*:GpuViews.*:Sm90Sanitize.*:Sm90Pdl.*:Sm90Graph.*:CorruptBlockTable.*' > $OUT/tests.txt 2>&1
S=/usr/local/cuda/bin/compute-sanitizer
for t in memcheck racecheck; do timeout 100 $S --tool $t /tmp/b/gpu-tests-F --gtest_filter='Sm90Sanitize.Sparse' --gtest_brief=1 2>&1 | grep -E "SUMMARY|PASSED|FAILED|Hazard|Invalid" | head -5 | sed "s/^/$t: /" >> $OUT/tests.txt; done
cd /tmp/j
timeout 100 /tmp/b/mlakit-F bench --dtype fp8-blockwise --q-dtype bf16 --seq-len 8192 --pdl --settle-ms 200 --replays 20 --verify-requests 1 --topk 2048 --heads 64,128 --s-q 1 --batch 4,8 --backend auto --json order.json > order.txt 2>&1
python3 -c "
import json
for r in json.load(open('order.json'))['results']: print(r['h_q'], r['s_q'], r['batch'], r['backend'], r['tactic'], round(r['time_us'], 1), r['check'])
" > $OUT/order.txt
tar cf $OUT/raw.tar *.json *.txt
grep -E "^\[  (PASSED|FAILED)|FAILED \]|memcheck|racecheck" $OUT/tests.txt | head; cat $OUT/order.txt
