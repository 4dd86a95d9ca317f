// The persistent indexer kernel's configuration and scheduling pieces (indexer_persistent.cu,
// the only includer): its warp roles and register split, its parameters, its shared-memory
// layout, and the units of work with the block-wide scan that finds a CTA's first one.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "backends/sm90/wgmma.cuh"
#include "ops/indexer/indexer.h"
#include "ops/indexer/indexer_device.cuh"

namespace mlakit::ops::indexer_persistent {

using indexer_device::kTile;
using indexer_device::kWgHeads;

constexpr int kConsumers = 4;
constexpr int kProducers = 4;
constexpr int kThreads = kConsumers * 128 + kProducers * 32;
constexpr int kWarps = kThreads / 32;
constexpr int kKeyBytes = kTile * kIndexerDim;
constexpr int kMinStages = 8, kMaxStages = 16;
static_assert(kMinStages % kProducers == 0 && kMinStages % kConsumers == 0 &&
              kMaxStages % kMinStages == 0);
// Registers per thread: the launch's (65536 / 640 rounded down to 8), then setmaxnreg moves the
// producers' spare ones to the consumers (64 accumulators, their sums and the unit's state).
constexpr int kLaunchRegs = 96, kProducerRegs = 64, kConsumerRegs = 104;
static_assert(65536 / kThreads / 8 * 8 == kLaunchRegs);
static_assert(kConsumers * 128 * kConsumerRegs + kProducers * 32 * kProducerRegs <=
                  kThreads * kLaunchRegs,
              "setmaxnreg.inc waits forever for registers the CTA does not hold");
static_assert(kProducers == 4, "setmaxnreg is per warpgroup: the producers are one");

struct PersistParams {
  CUtensorMap keys;     // as indexer_tma.cu's
  CUtensorMap queries;  // q as [b * next_n * heads][128] u8; boxes of heads x 128, 128-B swizzle
  const uint8_t* q;
  const float* weights;  // [b * next_n, heads]
  const uint8_t* cache;  // [num_pages, page_bytes]
  int64_t page_bytes;
  int64_t num_pages;
  int32_t page_size;
  int32_t box_rows;  // min(page_size, 64)
  const int32_t* block_table;
  int64_t block_table_stride;
  const int32_t* seq_lens;
  float* logits;  // [b * next_n, ld]
  int64_t ld;
  int64_t max_len;
  int32_t next_n;
  int32_t heads;
  int32_t batch;
  int32_t rows_per_unit;
  int32_t row_groups;  // units a request
  int32_t stages;
};

// Shared memory past its 1024-byte alignment: [stages][64][128] keys, [2][rows][hp][128] heads
// (both swizzled), [stages][64] scales, [2][rows][hp] weights, [stages] box masks, [stages] full
// and empty barriers, [2] heads-full and heads-empty barriers, the scan's scratch.
struct PersistLayout {
  int keys, q, scales, w, mask, full, empty, qfull, qempty, scan, bytes;
};
__host__ __device__ inline PersistLayout persist_layout_of(int stages, int rows, int hp) {
  PersistLayout l{};
  l.keys = 0;
  l.q = l.keys + stages * kKeyBytes;
  l.scales = l.q + 2 * rows * hp * kIndexerDim;
  l.w = l.scales + stages * kTile * 4;
  l.mask = l.w + 2 * rows * hp * 4;
  l.full = (l.mask + stages * 4 + 7) / 8 * 8;
  l.empty = l.full + stages * 8;
  l.qfull = l.empty + stages * 8;
  l.qempty = l.qfull + 2 * 8;
  l.scan = l.qempty + 2 * 8;                   // kWarps int64 sums, then 2 int64 results
  l.bytes = l.scan + (kWarps + 2) * 8 + 1024;  // + the alignment of the base
  return l;
}

// The kernel's device helpers, in the passes that compile its body (sm_90a; the host's).
#if !defined(__CUDA_ARCH__) || defined(MLAKIT_SM90_WGMMA)
constexpr int kSegTiles = kConsumers;  // tiles of a segment: one a consumer warpgroup
constexpr int kFillPiece = 4096;       // positions of a piece of the -inf fill

// Unit u: request i, its rows t0 .. t0 + rows - 1, the request's clamped length, row t0's
// visible length before clamping (row t0 + r sees min(len, vis0 + r)), its tiles and segments.
struct Unit {
  int i, t0, rows, len, vis0, tiles, segs;
};
template <bool kWarpUniform>
__device__ __forceinline__ Unit unit_of(const PersistParams& p, int64_t u) {
  Unit x;
  x.i = static_cast<int>(u / p.row_groups);
  x.t0 = static_cast<int>(u % p.row_groups) * p.rows_per_unit;
  x.rows = min(p.rows_per_unit, p.next_n - x.t0);
  int64_t len = indexer_device::request_length(p.seq_lens, x.i, p.max_len,
                                               p.block_table_stride * p.page_size);
  // Where the warp's lanes ask for the same unit: lane 0's length through a shuffle, so the
  // compiler knows the unit's values are the same across the warp (uniform registers and branches).
  if (kWarpUniform) len = __shfl_sync(0xffffffffu, len, 0);
  const int64_t vis_max = indexer_device::visible_length(len, p.next_n, x.t0 + x.rows - 1);
  x.len = static_cast<int>(len);  // <= max_len <= kMaxSeqLen
  x.vis0 = static_cast<int>(len - p.next_n + 1 + x.t0);
  x.tiles = static_cast<int>((vis_max + kTile - 1) / kTile);
  x.segs = (x.tiles + kSegTiles - 1) / kSegTiles;
  return x;
}

// Exclusive prefix of x over the CTA's threads, and their total in *total (every thread calls it;
// sums: kWarps int64 of shared memory).
__device__ __forceinline__ int64_t block_exclusive_scan(int64_t x, int64_t* sums, int64_t* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int64_t incl = x;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int64_t v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) sums[warp] = incl;
  __syncthreads();
  int64_t before = 0, all = 0;
  for (int w = 0; w < kWarps; ++w) {
    const int64_t v = sums[w];
    before += w < warp ? v : 0;
    all += v;
  }
  __syncthreads();  // sums is reused by the next call
  *total = all;
  return before + incl - x;
}

#endif

}  // namespace mlakit::ops::indexer_persistent
