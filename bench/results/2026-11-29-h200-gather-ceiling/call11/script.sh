#!/bin/bash
# Session 28 call 11: L3 = the lazy max + the `jumps` cases with the LSE tolerance 1e-2 (the LSE
# in the thousands); mut = L3 with a planted bug (the slow path forgets O's rescale): the sweep
# must fail on it. The sparse sweeps, PDL, graph, tune tests on L3.
set -u
mkdir -p /tmp/b
for f in gpu-tests-L3 gpu-tests-mut; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 200 /tmp/b/gpu-tests-L3 --gtest_filter='Sm90Sparse.*:Sm80Sparse.*:Sm90Sanitize.*:Sm90Pdl.*:Sm90Graph.*:Tune*:GpuViews.*:CorruptBlockTable.*' > $OUT/tests.txt 2>&1
timeout 100 /tmp/b/gpu-tests-mut --gtest_filter='Sm90Sparse.EveryTacticAgainstReference' > $OUT/mutant.txt 2>&1
grep -E "^\[  (PASSED|FAILED)|FAILED \]" $OUT/tests.txt | head; echo "== mutant"; grep -E "^\[  (PASSED|FAILED)" $OUT/mutant.txt; grep -E "tolerance" $OUT/mutant.txt | sed 's/.*v32/v32/' | cut -c1-160 | head -12
