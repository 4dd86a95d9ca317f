#!/bin/bash
# Is the per-SM streaming rate stable? h_q 16 b 128 L 8192 (trace build), tactic 5 three times,
# tactic 3 twice, h_q 128 b 128 L 8192 tactic 0 once; the main loop's median by SM id mod 8.
OUT=${OUT:-/tmp/out}; R=$OUT/smrate; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > $R/device.txt
i=0
for c in "16 5" "16 5" "16 3" "16 5" "16 3" "128 0"; do
  read -r h t <<<"$c"; i=$((i+1))
  timeout 120 .bin/mlakit-trace bench --heads $h --batch 128 --seq-len 8192 --pdl --backend sm90:$t --no-verify > $R/run$i-h$h-t$t.log 2>&1
  python3 .bin/grid_timeline.py $R/run$i-h$h-t$t.log > $R/run$i-h$h-t$t.summary
  gzip $R/run$i-h$h-t$t.log
done
tar czf $OUT/smrate.tgz -C $OUT smrate
for f in $R/*.summary; do echo "== $(basename $f)"; grep -E "main loop" $f; done
