#!/bin/bash
# Session 28 call 12: the whole GPU suite on main (b65729a: the order change, the lazy max, the
# jumps cases).
set -u
mkdir -p /tmp/b
xz -dc .peers/ab/gpu-tests-main.xz > /tmp/b/gpu-tests-main && chmod +x /tmp/b/gpu-tests-main
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 270 /tmp/b/gpu-tests-main > $OUT/suite.txt 2>&1
echo "rc $?" >> $OUT/suite.txt
grep -E "^\[  (PASSED|FAILED)|FAILED \]|^\[==========\]|^rc " $OUT/suite.txt | head -20
