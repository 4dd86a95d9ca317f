#!/bin/bash
# The tuner with and without settling each candidate (--settle-ms 0 / 250), uniform batches,
# twice each; then the GPU tests.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
for rep in 1 2; do for st in 0 250; do
  echo "## settle $st ms, rep $rep"
  timeout 200 .bin/mlakit tune --heads 128 --batch 8,64,128 --seq-len 4096 --pdl --uniform-only --force --settle-ms $st --cache $OUT/tune-$st-$rep.json 2>&1 | grep -v "^tuning\|buckets in" | sed 's/h128.s1.p64.q-bf16.kv-bf16.out-bf16.dense.causal.sinks0.lse0.pdl1.topk0//'
done; done | tee $OUT/settle.txt
echo "## bench, settle 0 and 1000 ms"
for st in 0 1000; do timeout 100 .bin/mlakit bench --heads 128 --batch 8,64,128 --seq-len 4096 --pdl --no-verify --backend sm90:0,sm90:2 --settle-ms $st 2>&1 | grep '^sm90' | sed "s/^/settle $st: /"; done | tee -a $OUT/settle.txt
timeout 500 stdbuf -oL .bin/mlakit_gpu_tests > $OUT/gpu-tests.txt 2>&1; echo "gpu tests rc $?"; grep -E "PASSED|FAILED|SKIPPED \]" $OUT/gpu-tests.txt | head -5
