#!/bin/bash
# H100: read stream and h_q 16 b 64 L 4096 three times (memory-bound target of issue 3).
echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
timeout 60 .bin/mlakit info --measure | tail -1
for r in 1 2 3; do
  timeout 60 .bin/mlakit bench --pdl --settle-ms 300 --heads 16 --batch 64 --seq-len 4096 --backend sm80:0 | grep sm80
done
timeout 60 .bin/mlakit info --measure | tail -1
