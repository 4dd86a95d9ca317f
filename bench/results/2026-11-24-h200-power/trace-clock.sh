#!/bin/bash
# Cycles per block (clock64 stamps of CTA 0) with and without the KV copies, and with the copies
# at two SM clocks: right after idle (boost) and right after 5 s of load (power cap).
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
H="--heads 128 --batch 128 --seq-len 8192 --pdl --no-verify"
tr() { # bin tactic tag
  timeout 100 .bin/$1 bench $H --backend sm90:$2 --replays 3 --warmup 1 > $OUT/$3.log 2>&1
  echo "== $3: $(grep -E '^sm90' $OUT/$3.log | head -1)"
  if [ $2 = 0 ]; then python3 .bin/trace_sm90.py $OUT/$3.log | grep -i "period\|landed\|Q K^T issue\|softmax\|owner's P"; else python3 .bin/pairs_trace.py $OUT/$3.log | head -3; fi
}
heat() { timeout 60 .bin/mlakit bench $H --backend sm90:0 --replays 400 2>&1 | grep '^sm90' | sed 's/^/   heat: /'; }
sleep 4; tr mlakit-tr 0 main-cold
heat; tr mlakit-tr 0 main-hot
sleep 4; tr mlakit-tr-abl 0 abl-main
sleep 4; tr mlakit-tr 6 pairs-cold
heat; tr mlakit-tr 6 pairs-hot
sleep 4; tr mlakit-tr-abl 6 abl-pairs
