#!/bin/bash
# Session 31 call 12: the combine as committed (a row a warp past eight rows a CTA... past one row
# a CTA): the tests that split, the sanitizers, and the grid's h_q 128 s_q 1 rows of auto.
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit mlakit_gpu_tests; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $W/gpu.txt
timeout 200 /tmp/b/mlakit_gpu_tests --gtest_filter='Sm90.*:Sm80.*:Sm90Graph*:Sm90Pdl*:Sm80Graph*:Sm80Pdl*:GpuLse*:GpuViews*:VarQGpu*:CorruptBlockTable*:CpMergeGpu*:Sm90Fp8.Sweep:Sm90Fp8Graph*:Sm90Fp8Pdl*:Sm80Fp8*' > $W/tests.txt 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED \]" $W/tests.txt | head
for tool in memcheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool /tmp/b/mlakit_gpu_tests --gtest_filter='Sm90Sanitize.Small:Sm80Sanitize.*' > $W/san_$tool.txt 2>&1
  echo "$tool rc $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $W/san_$tool.txt | tail -1) $(grep -E '^\[  (PASSED|FAILED)' $W/san_$tool.txt)"
done
timeout 150 /tmp/b/mlakit bench --dtype fp8 --q-dtype fp8 --grid standard --heads 128 --s-q 1 --pdl --settle-ms 300 \
  --verify-requests 1 --backend auto --reference .peers/ab/ref.csv --json $W/grid.json > $W/grid.txt 2>&1
echo "grid rc $?"; awk '$2==128 && $3==1 && $4>=8' $W/grid.txt
tar czf $OUT/all.tgz -C $OUT w
