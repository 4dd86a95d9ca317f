#!/bin/bash
OUT=${OUT:-/tmp/out}; R=$OUT/h100t; mkdir -p $R
echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
timeout 240 .bin/mlakit_gpu_tests --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?"
grep -E "PASSED|FAILED|SKIPPED" $R/gpu-tests.txt | head
grep -E "tactic [0-3]" $R/gpu-tests.txt | head -3
