// Scores of the kRoles loop's score-warp pairs (decode_roles.cuh): S = Q K^T, mma.sync m16n8k16,
// fp32 accumulate.
//
// Score warp w = 2 rg + kg computes the partial scores of the 32 query rows 32 rg .. 32 rg + 31
// over its half kg of the 576 dims against all kBlockN tokens of a tile. Each K fragment then feeds
// the mma of two row blocks: the four score warps read K twice per tile instead of four times (16
// whole rows per warp), and the shared-memory pipe, which the score warps and the output warps
// share, carries about a fifth less per tile. The pair then swaps halves of its partials
// (decode_roles.cuh) so that warp w holds the whole scores of rows 16 w .. 16 w + 15, the layout of
// one score warp of 16 whole rows, which the softmax takes (qk_softmax.cuh, softmax_full_rows).
//
// The k-steps of warp kg are those of KStepOffsets<2>: 2 of every 4. Its first kRegSteps are mma
// A fragments of both row blocks held in registers for the whole chunk, the rest are read from the
// Q tile per tile.
#pragma once

#include "backends/sm80/config.h"
#include "backends/sm80/mma.cuh"
#include "backends/sm80/qk_split_k.cuh"
#include "kernels/common/ptx.h"

namespace mlakit::sm80 {

template <typename T, int kRegSteps>
class PairScores {
 public:
  static constexpr int kSteps = kKSteps / 2;  // k-steps per warp
  static constexpr int kNTiles = kBlockN / 8;
  static constexpr int kRowBlocks = 2;
  static_assert(kRegSteps >= 0 && kRegSteps <= kSteps);
  // The k-steps of Q held in registers (one unused entry when none).
  using QRegs = uint32_t[kRegSteps > 0 ? kRegSteps : 1][kRowBlocks][4];

  __device__ __forceinline__ PairScores(uint32_t s_q, int warp, int lane)
      // B (K): x4 covers two n8 tiles: lanes 0-7 tokens 0-7, low dims; 8-15 tokens 0-7, high
      // dims; 16-23 and 24-31 the same for tokens 8-15.
      : b_row_(((lane / 16) * 8 + lane % 8) * kRowBytes),
        b_offset_(warp % 2, (lane / 8) % 2, lane & 7),
        // A (Q): lanes 0-15 rows 0-15 of the row block, low 8 dims; lanes 16-31 the high 8. Row
        // block 0 is the warp's own (rows 16 warp ..), which it finishes; 1 is the other warp's.
        a_base_{s_q + (warp * 16 + lane % 16) * kRowBytes,
                s_q + ((warp ^ 1) * 16 + lane % 16) * kRowBytes},
        a_offset_(warp % 2, lane / 16, lane & 7) {}

  // This warp's k-steps of Q held in registers (once per chunk, the Q tile in shared memory).
  __device__ __forceinline__ void load_q(QRegs& qf) const {
#pragma unroll
    for (int i = 0; i < kRegSteps; ++i) load_a(i, qf[i]);
  }

  // The partial scores of the tile in s_kv: acc[row block][n8 tile][4] (row block 0: this warp's
  // rows, 1: the other warp's), the fragments of each k-step loaded kAhead k-steps before its mma.
  // mid() runs after the loads of k-step kMidStep are issued: other work (the previous tile's
  // softmax) that ptxas may then schedule among the mma.
  template <int kAhead, int kMidStep = -1, typename Mid = void (*)()>
  __device__ __forceinline__ void run(
      uint32_t s_kv, const QRegs& qf, float (&acc)[kRowBlocks][kNTiles][4],
      Mid&& mid = [] {}) const {
    static_assert(kAhead >= 1 && kAhead <= kSteps);
#pragma unroll
    for (int mb = 0; mb < kRowBlocks; ++mb) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[mb][nt][k] = 0.0f;
      }
    }
    const uint32_t b_base = s_kv + b_row_;
    uint32_t a[kAhead][kRowBlocks][4], b[kAhead][kNTiles / 2][4];
#pragma unroll
    for (int i = 0; i < kSteps + kAhead; ++i) {
      if (i >= kAhead) {
        const int step = i - kAhead;
        const int j = step % kAhead;
#pragma unroll
        for (int mb = 0; mb < kRowBlocks; ++mb) {
          uint32_t am[4];
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            am[k] = step < kRegSteps ? qf[step < kRegSteps ? step : 0][mb][k] : a[j][mb][k];
          }
#pragma unroll
          for (int np = 0; np < kNTiles / 2; ++np) {
            mma_m16n8k16<T>(acc[mb][2 * np], am, b[j][np][0], b[j][np][1]);
            mma_m16n8k16<T>(acc[mb][2 * np + 1], am, b[j][np][2], b[j][np][3]);
          }
        }
      }
      if (i < kSteps) {
        const int j = i % kAhead;
        if (i >= kRegSteps) load_a(i, a[j]);
#pragma unroll
        for (int np = 0; np < kNTiles / 2; ++np) {
          ptx::ldmatrix_sync_x4(b[j][np], b_base + np * 16 * kRowBytes + b_offset_(i));
        }
      }
      if (i == kMidStep) mid();
    }
  }

 private:
  // Both row blocks' A fragments of k-step i from the Q tile.
  __device__ __forceinline__ void load_a(int i, uint32_t (&a)[kRowBlocks][4]) const {
#pragma unroll
    for (int mb = 0; mb < kRowBlocks; ++mb) {
      ptx::ldmatrix_sync_x4(a[mb], a_base_[mb] + a_offset_(i));
    }
  }

  uint32_t b_row_;
  KStepOffsets<2> b_offset_;
  uint32_t a_base_[kRowBlocks];
  KStepOffsets<2> a_offset_;
};

}  // namespace mlakit::sm80
