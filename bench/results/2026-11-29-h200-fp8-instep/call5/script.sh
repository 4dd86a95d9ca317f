#!/bin/bash
# Session 30 call 5: bench/micro/wgmma_rate.cu (9efef2b, built on the development machine:
#   nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude -o wgmma_rate bench/micro/wgmma_rate.cu)
# run twice.
mkdir -p $OUT && nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt; .peers/ab/wgmma_rate | tee $OUT/wgmma_rate.txt; .peers/ab/wgmma_rate > $OUT/wgmma_rate_rep2.txt
