#!/bin/bash
# Session 29: the package's CPU tests with PyTorch (CI has no torch): the torch ops' pdl argument,
# their fakes, opcheck and torch.compile, at 1807d12 (the cpu backend alone).
set -u
export PYTHONUNBUFFERED=1
mkdir -p $OUT
MLAKIT_CUDA=OFF MLAKIT_VENV=system timeout 200 python/run_tests.sh --offline test_ops_cpu.py test_v32_layer_cpu.py -rs > $OUT/pytest_cpu.txt 2>&1
echo "rc $?" >> $OUT/pytest_cpu.txt
grep -E "passed|failed|error|SKIPPED|^rc|installed in" $OUT/pytest_cpu.txt | tail -12
