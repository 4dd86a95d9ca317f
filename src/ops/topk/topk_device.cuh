// Device helpers shared by the multi-block (topk_multi.cu) and cluster (topk_cluster.cu,
// topk_stream.cu) top-k kernels: the bin search over a block's histogram, a row's 16-byte load and
// the write of one output.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "ops/topk/topk.h"

namespace mlakit::ops::topk_device {

struct BinPick {
  uint32_t bin;  // the bin holding the remaining-th largest key
  int above;     // keys in higher bins
};

// Over a histogram of kBins bins, the bin d with (keys above d) < remaining <= (keys at or above
// d); exactly one thread finds it. Ends with a barrier: *out is then visible to every thread.
template <int kBins, int kThreads, cub::BlockScanAlgorithm kAlgorithm = cub::BLOCK_SCAN_RAKING>
__device__ __forceinline__ void pick_bin(
    const int* s_hist, int remaining,
    typename cub::BlockScan<int, kThreads, kAlgorithm>::TempStorage& scan, BinPick* out) {
  static_assert(kBins % kThreads == 0, "the bin search gives each thread a run");
  constexpr int kRun = kBins / kThreads;  // thread t: bins kBins-1-t*kRun downwards
  int count[kRun];
  int sum = 0;
#pragma unroll
  for (int e = 0; e < kRun; ++e) {
    count[e] = s_hist[kBins - 1 - (threadIdx.x * kRun + e)];
    sum += count[e];
  }
  int above;
  cub::BlockScan<int, kThreads, kAlgorithm>(scan).ExclusiveSum(sum, above);
#pragma unroll
  for (int e = 0; e < kRun; ++e) {
    if (above < remaining && above + count[e] >= remaining) {
      *out = {.bin = static_cast<uint32_t>(kBins - 1 - (threadIdx.x * kRun + e)), .above = above};
    }
    above += count[e];
  }
  __syncthreads();
}

// src[j, j + 4) with the positions from len on read as 0: one 16-byte load where `vec` (src + j
// 16-byte aligned) and all four are below len.
__device__ __forceinline__ float4 load4(const float* src, int j, int len, bool vec) {
  if (vec && j + 3 < len) return *reinterpret_cast<const float4*>(src + j);
  return make_float4(j < len ? src[j] : 0.0f, j + 1 < len ? src[j + 1] : 0.0f,
                     j + 2 < len ? src[j + 2] : 0.0f, j + 3 < len ? src[j + 3] : 0.0f);
}

// Writes output m of row r: position pos (-1 = none) and its cache slot through the request's
// block table `pages` (-1 where the page id is negative).
__device__ __forceinline__ void emit(const TopkRows& p, const int32_t* pages, int64_t r, int64_t m,
                                     int64_t pos) {
  int32_t slot = -1;
  if (pos >= 0) {
    const int32_t page = pages[pos / p.page_size];
    if (page >= 0) slot = static_cast<int32_t>(int64_t{page} * p.page_size + pos % p.page_size);
  }
  p.indices[r * p.k + m] = slot;
  if (p.positions != nullptr) p.positions[r * p.k + m] = static_cast<int32_t>(pos);
}

}  // namespace mlakit::ops::topk_device
