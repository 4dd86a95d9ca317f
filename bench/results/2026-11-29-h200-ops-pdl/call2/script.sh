#!/bin/bash
# Session 29 call 7: the Python package (CUDA 90a) at c6c8550 built here; its GPU tests of the
# ops (the torch ops with pdl among them), and the V3.2 layer step with and without --pdl.
set -u
export PYTHONUNBUFFERED=1
mkdir -p $OUT/w
W=$OUT/w
start=$SECONDS
MLAKIT_CUDA_ARCHITECTURES=90a MLAKIT_VENV=system timeout 300 python/run_tests.sh --offline -m gpu -k "ops or pdl or topk or indexer" > $W/pytest.txt 2>&1
echo "rc $? after $((SECONDS - start)) s" >> $W/pytest.txt
grep -E "passed|failed|error|installed in|^rc" $W/pytest.txt | tail -5
PY=python3
for p in "" "--pdl"; do
  for b in 64 1; do
    timeout 60 $PY bench/v32_layer_bench.py --batch $b --len 32768 --heads 128 --topk 2048 $p > $W/layer_b${b}${p}.txt 2>&1
    echo "== batch $b $p"; tail -8 $W/layer_b${b}${p}.txt
  done
done
tar czf $OUT/all.tgz -C $OUT w
