#!/bin/bash
# Session 31 call 10: the whole GPU suite with the combine's 32-bit item math (main + the combine
# change), the sanitizers on the sm90 sanitize cases, and the default bench.
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit mlakit_gpu_tests; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
timeout 330 /tmp/b/mlakit_gpu_tests > $W/suite.txt 2>&1
echo "suite rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED \]|SKIPPED \]|test suites ran" $W/suite.txt | head -20
for tool in memcheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool /tmp/b/mlakit_gpu_tests --gtest_filter='Sm90Sanitize.Small:Sm80Sanitize.*' > $W/san_$tool.txt 2>&1
  echo "$tool rc $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/san_$tool.txt | tail -1) $(grep -E '^\[  (PASSED|FAILED)' $W/san_$tool.txt)"
done
timeout 60 /tmp/b/mlakit bench > $W/bench_default.txt 2>&1; echo "bench rc $?"; tail -3 $W/bench_default.txt
tar czf $OUT/all.tgz -C $OUT w
