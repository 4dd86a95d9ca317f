// Split-K scores S = Q K^T of the sm80 decode kernel (mma.sync m16n8k16, fp32 accumulate).
//
// Warp (rg, kg) computes the partial scores of Q rows rg * 16 .. + 16 at its share of the 576
// dims against all kBlockN tokens of a tile (kBlockN / 8 independent accumulator chains, K
// fragments by ldmatrix): per k-step two ldmatrix.x4 of K for four mma. Its first kQRegSteps
// k-steps of Q are mma A fragments held in registers for the whole chunk (all of them in the 16-
// and 32-row tiles), the rest are read from shared memory per tile (all of them in the 64-row
// tile, config.h). The partials go to shared memory as [warp][n8 tile][lane][4] floats (one
// 16-byte store per lane and tile: no bank conflicts); after a barrier, warp (rg, tg) sums, in a
// fixed order, the partials of its kSNTiles n8 tiles from the warps of its row group. The result
// is exactly the fragment the token-split layout computes, so masking and softmax
// (qk_softmax.cuh) are shared.
//
// The k-steps of warp kg are kk = 4 * (i / kRun) + kRun * kg + i % kRun for i < kKStepsPerWarp
// (kRun = 4 / kSColGroups consecutive k-steps out of every 4): the swizzled chunk of a k-step is
// then a per-lane register plus a compile-time offset, so the unrolled loop computes no address.
#pragma once

#include "backends/sm80/config.h"
#include "backends/sm80/loads.cuh"
#include "backends/sm80/mma.cuh"
#include "kernels/common/ptx.h"

namespace mlakit::sm80 {

// The k-steps of Q a warp holds in registers (one unused entry when it holds none).
template <typename Cfg>
using QFragments = uint32_t[Cfg::kQRegSteps > 0 ? Cfg::kQRegSteps : 1][4];

// Byte offsets of the k-steps of warp kg for a lane reading chunk parity `hi` of rows with
// swizzle x: offset(i) = (i / kRun) * 128 + lane_offset[i % kRun].
template <int kColGroups>
struct KStepOffsets {
  static constexpr int kRun = 4 / kColGroups;
  uint32_t lane_offset[kRun];

  __device__ __forceinline__ KStepOffsets(int kg, int hi, int x) {
#pragma unroll
    for (int j = 0; j < kRun; ++j) lane_offset[j] = ((2 * (kRun * kg + j) + hi) ^ x) << 4;
  }
  __device__ __forceinline__ uint32_t operator()(int i) const {
    return (i / kRun) * 128 + lane_offset[i % kRun];
  }
};

// Loads this warp's Q fragments from the Q tile (call once the tile is in shared memory).
template <typename Cfg>
__device__ __forceinline__ void load_q_fragments(uint32_t s_q, int warp, int lane,
                                                 QFragments<Cfg>& qf) {
  const int rg = warp / Cfg::kSColGroups, kg = warp % Cfg::kSColGroups;
  const int row = rg * 16 + lane % 16;  // lanes 16-31: the high 8 dims of each k-step
  const uint32_t base = s_q + row * kRowBytes;
  const KStepOffsets<Cfg::kSColGroups> offset(kg, lane / 16, row & 7);
#pragma unroll
  for (int i = 0; i < Cfg::kQRegSteps; ++i) ptx::ldmatrix_sync_x4(qf[i], base + offset(i));
}

// One warp's split-K partial scores of one tile: its 16 rows of Q at its share of the dims
// against all kBlockN tokens, one k-step at a time (step), then to shared memory (store).
template <typename T, typename Cfg>
class SplitKScores {
 public:
  static constexpr int kNTiles = kBlockN / 8;

  __device__ __forceinline__ SplitKScores(uint32_t s_q, uint32_t s_kv, int warp, int lane)
      // B (K): x4 covers two n8 tiles: lanes 0-7 tokens 0-7, low dims; 8-15 tokens 0-7, high
      // dims; 16-23 and 24-31 the same for tokens 8-15.
      : b_base_(s_kv + ((lane / 16) * 8 + lane % 8) * kRowBytes),
        b_offset_(warp % Cfg::kSColGroups, (lane / 8) % 2, lane & 7),
        // Q k-steps past kQRegSteps come from shared memory (rows as in load_q_fragments).
        a_base_(s_q + ((warp / Cfg::kSColGroups) * 16 + lane % 16) * kRowBytes),
        a_offset_(warp % Cfg::kSColGroups, lane / 16, lane & 7) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int k = 0; k < 4; ++k) part_[nt][k] = 0.0f;
    }
  }

  // k-step i of the warp's kKStepsPerWarp (a compile-time index once unrolled).
  __device__ __forceinline__ void step(int i, const QFragments<Cfg>& qf) {
    uint32_t a[4];
    if (i < Cfg::kQRegSteps) {
      q_from_registers(i, qf, a);
    } else {
      load_a(i, a);
    }
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      uint32_t b[4];
      load_b(i, np, b);
      mma_pair(np, a, b);
    }
  }

  // The partials as [warp][n8 tile][lane][4] floats: one 16-byte store per lane and tile, no
  // bank conflicts.
  __device__ __forceinline__ void store(float* score_parts, int warp, int lane) const {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      *reinterpret_cast<float4*>(score_parts + ((warp * kNTiles + nt) * 32 + lane) * 4) =
          make_float4(part_[nt][0], part_[nt][1], part_[nt][2], part_[nt][3]);
    }
  }

 private:
  // The A fragment of k-step i from shared memory (the k-steps past those held in registers).
  __device__ __forceinline__ void load_a(int i, uint32_t (&a)[4]) const {
    if (i >= Cfg::kQRegSteps) ptx::ldmatrix_sync_x4(a, a_base_ + a_offset_(i));
  }
  // The A fragment of k-step i < kQRegSteps, held in registers for the chunk.
  __device__ __forceinline__ static void q_from_registers(int i, const QFragments<Cfg>& qf,
                                                          uint32_t (&a)[4]) {
#pragma unroll
    for (int k = 0; k < 4; ++k) a[k] = qf[i < Cfg::kQRegSteps ? i : 0][k];
  }
  // K of k-step i for n8 tiles 2 np and 2 np + 1.
  __device__ __forceinline__ void load_b(int i, int np, uint32_t (&b)[4]) const {
    ptx::ldmatrix_sync_x4(b, b_base_ + np * 16 * kRowBytes + b_offset_(i));
  }
  __device__ __forceinline__ void mma_pair(int np, const uint32_t (&a)[4], const uint32_t (&b)[4]) {
    mma_m16n8k16<T>(part_[2 * np], a, b[0], b[1]);
    mma_m16n8k16<T>(part_[2 * np + 1], a, b[2], b[3]);
  }

  uint32_t b_base_;
  KStepOffsets<Cfg::kSColGroups> b_offset_;
  uint32_t a_base_;
  KStepOffsets<Cfg::kSColGroups> a_offset_;
  float part_[kNTiles][4];
};

// acc[nt] = the sum, in a fixed order, of n8 tile nt0 + nt of the partials of the warps of this
// warp's row group (after the barrier that follows their stores).
template <typename Cfg, int kTiles>
__device__ __forceinline__ void sum_partials(const float* score_parts, int warp, int lane, int nt0,
                                             float (&acc)[kTiles][4]) {
  constexpr int kNTiles = kBlockN / 8;
  const int rg = warp / Cfg::kSColGroups;
#pragma unroll
  for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[nt][k] = 0.0f;
#pragma unroll
    for (int from = 0; from < Cfg::kSColGroups; ++from) {
      const int src = rg * Cfg::kSColGroups + from;
      const float4 v = *reinterpret_cast<const float4*>(
          score_parts + ((src * kNTiles + nt0 + nt) * 32 + lane) * 4);
      acc[nt][0] += v.x;
      acc[nt][1] += v.y;
      acc[nt][2] += v.z;
      acc[nt][3] += v.w;
    }
  }
}

// acc = the warp's scores for its n8 tiles of the tile in s_kv (after a barrier inside).
template <typename T, typename Cfg>
__device__ __forceinline__ void compute_scores_split_k(const QFragments<Cfg>& qf, uint32_t s_q,
                                                       uint32_t s_kv, float* score_parts, int warp,
                                                       int lane, float (&acc)[Cfg::kSNTiles][4]) {
  SplitKScores<T, Cfg> scores(s_q, s_kv, warp, lane);
  // ptxas interleaves the ldmatrix of each k-step with the mma of the previous one, and no
  // deeper: source-level buffers of one or two k-steps ahead compiled to the same SASS (the 64-row
  // tile's 255 registers leave no room for more; ncu there: 36% of stalls wait on ldmatrix).
#pragma unroll
  for (int i = 0; i < Cfg::kKStepsPerWarp; ++i) scores.step(i, qf);
  scores.store(score_parts, warp, lane);
  __syncthreads();  // all partials of the tile are in shared memory
  // After the sum, warp (rg, tg = kg) owns n8 tiles tg * kSNTiles ..
  sum_partials<Cfg>(score_parts, warp, lane, (warp % Cfg::kSColGroups) * Cfg::kSNTiles, acc);
}

}  // namespace mlakit::sm80
