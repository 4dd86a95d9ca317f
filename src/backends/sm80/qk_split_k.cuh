// Split-K scores of the sm80 decode kernel (configs with kSplitK: the 16- and 32-row tiles).
//
// Warp (rg, kg) holds Q rows rg * 16 .. + 16, dims [kg, kg + 1) * 576 / kSColGroups as mma A
// fragments in registers for the whole chunk, and computes their partial scores against all
// kBlockN tokens of a tile (kBlockN / 8 independent accumulator chains, K fragments by ldmatrix).
// The partials go to shared memory as [warp][n8 tile][lane][4] floats (one 16-byte store per
// lane and tile: no bank conflicts); after a barrier, warp (rg, tg) sums, in a fixed order, the
// partials of n8 tile tg from the warps of its row group. The result is exactly the fragment the
// token-split layout computes, so masking and softmax (qk_softmax.cuh) are shared.
#pragma once

#include "backends/sm80/config.h"
#include "backends/sm80/loads.cuh"
#include "backends/sm80/mma.cuh"
#include "kernels/common/ptx.h"

namespace mlakit::sm80 {

template <typename Cfg>
using QFragments = uint32_t[Cfg::kKStepsPerWarp][4];

// Loads this warp's Q fragments from the Q tile (call once the tile is in shared memory).
template <typename Cfg>
__device__ __forceinline__ void load_q_fragments(uint32_t s_q, int warp, int lane,
                                                 QFragments<Cfg>& qf) {
  const int rg = warp / Cfg::kSColGroups, kg = warp % Cfg::kSColGroups;
  const int row = rg * 16 + lane % 16;  // lanes 16-31: the high 8 dims of each k-step
  const uint32_t base = s_q + row * kRowBytes;
#pragma unroll
  for (int ks = 0; ks < Cfg::kKStepsPerWarp; ++ks) {
    const int kk = kg * Cfg::kKStepsPerWarp + ks;
    ptx::ldmatrix_sync_x4(qf[ks], base + (((2 * kk + lane / 16) ^ (row & 7)) << 4));
  }
}

// acc = the warp's scores for n8 tile tg of the tile in s_kv (after a barrier inside).
template <typename T, typename Cfg>
__device__ __forceinline__ void compute_scores_split_k(const QFragments<Cfg>& qf, uint32_t s_kv,
                                                       float* score_parts, int warp, int lane,
                                                       float (&acc)[1][4]) {
  constexpr int kNTiles = kBlockN / 8;
  const int rg = warp / Cfg::kSColGroups, kg = warp % Cfg::kSColGroups;
  float part[kNTiles][4];
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int k = 0; k < 4; ++k) part[nt][k] = 0.0f;
  }
  // B (K): x4 covers two n8 tiles: lanes 0-7 tokens 0-7, low dims; 8-15 tokens 0-7, high dims;
  // 16-23 and 24-31 the same for tokens 8-15.
  const int b_row = (lane / 16) * 8 + lane % 8;
  const int b_hi = (lane / 8) % 2;
  const uint32_t b_base = s_kv + b_row * kRowBytes;
#pragma unroll
  for (int ks = 0; ks < Cfg::kKStepsPerWarp; ++ks) {
    const int kk = kg * Cfg::kKStepsPerWarp + ks;
    const uint32_t b_chunk = ((2 * kk + b_hi) ^ (lane & 7)) << 4;
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      uint32_t b[4];
      ptx::ldmatrix_sync_x4(b, b_base + np * 16 * kRowBytes + b_chunk);
      mma_m16n8k16<T>(part[2 * np], qf[ks], b[0], b[1]);
      mma_m16n8k16<T>(part[2 * np + 1], qf[ks], b[2], b[3]);
    }
  }
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    *reinterpret_cast<float4*>(score_parts + ((warp * kNTiles + nt) * 32 + lane) * 4) =
        make_float4(part[nt][0], part[nt][1], part[nt][2], part[nt][3]);
  }
  __syncthreads();    // all partials of the tile are in shared memory
  const int tg = kg;  // after the sum, warp (rg, tg) owns n8 tile tg
#pragma unroll
  for (int k = 0; k < 4; ++k) acc[0][k] = 0.0f;
#pragma unroll
  for (int from = 0; from < Cfg::kSColGroups; ++from) {
    const int src = rg * Cfg::kSColGroups + from;
    const float4 v =
        *reinterpret_cast<const float4*>(score_parts + ((src * kNTiles + tg) * 32 + lane) * 4);
    acc[0][0] += v.x;
    acc[0][1] += v.y;
    acc[0][2] += v.z;
    acc[0][3] += v.w;
  }
}

}  // namespace mlakit::sm80
