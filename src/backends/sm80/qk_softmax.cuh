// Masking and online softmax of the sm80 decode kernel, on the scores that qk_split_k.cuh leaves
// in the score layout of config.h: warp (row group rg, token group tg) owns 16 rows x kSTokens
// tokens of each tile. Masking: tokens at or past the chunk's end, and with causal MTP
// (s_q > 1) the positions a query token must not see. The running max of each row is shared by
// the token groups through shared memory (tile_max), so all warps of a row group agree on it
// bit for bit; P = exp2(S * scale * log2 e - max) goes to shared memory in the input dtype for the
// P V product of any warp, and alpha (the rescale of O) with it. Fully masked rows keep max -inf
// and produce P = 0, alpha = 0, never NaN.
#pragma once

#include <cmath>

#include "backends/sm80/config.h"
#include "backends/sm80/loads.cuh"
#include "backends/sm80/mma.cuh"
#include "backends/sm80/params.h"
#include "kernels/common/numeric.cuh"
#include "kernels/common/ptx.h"
#include "plan/page_mask.cuh"

namespace mlakit::sm80 {

// Byte offset of 16-byte chunk `chunk` (8 tokens) of row `row` in the [kRows][kBlockN] P tile.
__device__ __forceinline__ uint32_t p_chunk_offset(int row, int chunk) {
  return static_cast<uint32_t>(row * kBlockN * 2 + ((chunk ^ ((row >> 1) & 3)) << 4));
}

// Softmax state of one thread in the score layout: rows rg * 16 + g and rg * 16 + g + 8. The
// positions are recomputed from the thread index where used (registers are the scarce resource).
template <typename Cfg>
struct ScoreState {
  float max[2];  // running row max, raw score units
  float sum[2];  // this thread's share of the softmax denominator

  __device__ __forceinline__ int warp() const { return static_cast<int>(threadIdx.x) / 32; }
  __device__ __forceinline__ int rg() const { return warp() / Cfg::kSColGroups; }
  __device__ __forceinline__ int tg() const { return warp() % Cfg::kSColGroups; }
  __device__ __forceinline__ int g() const { return static_cast<int>(threadIdx.x) % 32 / 4; }
  __device__ __forceinline__ int q() const { return static_cast<int>(threadIdx.x) % 4; }
  __device__ __forceinline__ int row(int e) const { return rg() * 16 + g() + 8 * e; }

  __device__ __forceinline__ ScoreState() {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      max[e] = -INFINITY;
      sum[e] = 0.0f;
    }
  }
};

// Tokens at or past this bound are masked for query row r of the request: the chunk's end, and
// with causal MTP the positions token r / h_q must not see (with context parallelism the bound
// counted from the global length: DecodeParamsBase::causal_bounds). Recomputed where needed (the
// last tiles of a chunk) rather than held in registers.
__device__ __forceinline__ int visible_bound(const DecodeParams& p, const plan::Chunk& c, int r) {
  if (!p.causal) return min(c.seq_len, c.token_end);
  if (p.causal_bounds != nullptr) {  // (rows past the tile's last are clamped to a real token)
    return min(p.causal_bounds[c.request * p.s_q + min(r / p.h_q, p.s_q - 1)], c.token_end);
  }
  return min(c.seq_len - p.s_q + 1 + r / p.h_q, c.token_end);
}

// Where a row's P is measured from once its max moves from old_max to new_max (raw score units):
// max_scaled, 0 for a row with nothing visible yet (max -inf), so that P is 2^-inf = 0, never NaN;
// and alpha, the rescale of O, exactly 1 when the max did not move (the output warps then skip
// the rescale).
struct Rebase {
  float max_scaled;
  float alpha;
};
__device__ __forceinline__ Rebase rebase(float old_max, float new_max, float scale_log2) {
  const float max_scaled = new_max == -INFINITY ? 0.0f : new_max * scale_log2;
  const float alpha =
      new_max == old_max ? 1.0f : ptx::ex2_approx_ftz_f32(fmaf(old_max, scale_log2, -max_scaled));
  return {max_scaled, alpha};
}

// Row e of this thread's tokens (scores in p[nt][2e .. 2e + 1]) moves to max new_max: p becomes
// P (exp2 against the new reference), the state's max and denominator follow; returns alpha.
template <typename Cfg>
__device__ __forceinline__ float advance_row(ScoreState<Cfg>& st, int e, float new_max,
                                             float scale_log2, float (&p)[Cfg::kSNTiles][4]) {
  const auto [max_scaled, alpha] = rebase(st.max[e], new_max, scale_log2);
  st.max[e] = new_max;
  float tile_sum = 0.0f;
#pragma unroll
  for (int nt = 0; nt < Cfg::kSNTiles; ++nt) {
#pragma unroll
    for (int k = 2 * e; k < 2 * e + 2; ++k) {
      p[nt][k] = ptx::ex2_approx_ftz_f32(fmaf(p[nt][k], scale_log2, -max_scaled));
      tile_sum += p[nt][k];
    }
  }
  st.sum[e] = st.sum[e] * alpha + tile_sum;
  return alpha;
}

// The bad-token bits of the tile in `stage` (SharedStorage::bad_tokens), once it is visible.
template <typename T, typename Cfg>
__device__ __forceinline__ uint32_t bad_tokens_of_stage(const SharedStorage<T, Cfg>& s, int stage) {
  return plan::kPageChecks ? s.bad_tokens[stage] : 0;
}

// Masks the scores of the tile starting at token `tile_start` (past the rows' bounds, and the
// tokens of bad pages: bits of bad_tokens_of_stage) and publishes each row's max.
template <typename T, typename Cfg>
__device__ __forceinline__ void mask_and_publish_max(float (&acc)[Cfg::kSNTiles][4],
                                                     const ScoreState<Cfg>& st,
                                                     const DecodeParams& p, const plan::Chunk& c,
                                                     int row0, int tile_start, uint64_t bad,
                                                     SharedStorage<T, Cfg>& s) {
  // Causal bounds grow with the row: the tile's first row has the smallest (uniform branch).
  if (tile_start + kBlockN > visible_bound(p, c, row0) || bad != 0) {
    const int bound[2] = {visible_bound(p, c, row0 + st.row(0)),
                          visible_bound(p, c, row0 + st.row(1))};
#pragma unroll
    for (int nt = 0; nt < Cfg::kSNTiles; ++nt) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int j = st.tg() * Cfg::kSTokens + nt * 8 + 2 * st.q() + (k & 1);
        if (tile_start + j >= bound[k / 2] || plan::bad_token(bad, j)) acc[nt][k] = -INFINITY;
      }
    }
  }
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < Cfg::kSNTiles; ++nt) {
#pragma unroll
    for (int k = 0; k < 4; ++k) tile_max[k / 2] = fmaxf(tile_max[k / 2], acc[nt][k]);
  }
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    tile_max[e] = fmaxf(tile_max[e], __shfl_xor_sync(0xffffffffu, tile_max[e], 1));
    tile_max[e] = fmaxf(tile_max[e], __shfl_xor_sync(0xffffffffu, tile_max[e], 2));
    if (st.q() == 0) s.tile_max[st.tg()][st.row(e)] = tile_max[e];
  }
}

// After the barrier: the new row max, P (to shared memory) and alpha; updates the state.
template <typename T, typename Cfg>
__device__ __forceinline__ void softmax_to_shared(float (&acc)[Cfg::kSNTiles][4],
                                                  ScoreState<Cfg>& st, float scale_log2,
                                                  SharedStorage<T, Cfg>& s) {
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int row = st.row(e);
    float new_max = st.max[e];
#pragma unroll
    for (int t = 0; t < Cfg::kSColGroups; ++t) new_max = fmaxf(new_max, s.tile_max[t][row]);
    const float alpha = advance_row<Cfg>(st, e, new_max, scale_log2, acc);
    if (st.tg() == 0 && st.q() == 0) s.alpha[row] = alpha;
  }
  auto* s_p = reinterpret_cast<char*>(s.p);
#pragma unroll
  for (int nt = 0; nt < Cfg::kSNTiles; ++nt) {
    const int chunk = (st.tg() * Cfg::kSTokens) / 8 + nt;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int row = st.row(e);
      *reinterpret_cast<uint32_t*>(s_p + p_chunk_offset(row, chunk) + 4 * st.q()) =
          pack2<T>(acc[nt][2 * e], acc[nt][2 * e + 1]);
    }
  }
}

// How far (log2 of P) a row's running max may lag its true max in softmax_full_rows.
inline constexpr float kLazyRescaleLog2 = 8.0f;

// Softmax over whole rows (config.h, kRoles), in two parts so that the second can run inside the
// next tile's score loop (decode_roles.cuh): acc holds this warp's scores of its rows for all
// kBlockN tokens of the tile.
//
// mask_full_rows masks the tile starting at token `tile_start` (bad: bad_tokens_of_stage).
// mask_from: visible_bound(p, c, row0), the smallest bound of the tile's rows, computed once per
// chunk (its division by h_q per tile sat on the score warps' critical path).
template <typename Cfg>
__device__ __forceinline__ void mask_full_rows(float (&acc)[kBlockN / 8][4],
                                               const ScoreState<Cfg>& st, const DecodeParams& p,
                                               const plan::Chunk& c, int row0, int tile_start,
                                               int mask_from, uint32_t bad) {
  static_assert(Cfg::kSColGroups == 1, "whole rows");
  if (tile_start + kBlockN > mask_from || bad != 0) {
    const int bound[2] = {visible_bound(p, c, row0 + st.row(0)),
                          visible_bound(p, c, row0 + st.row(1))};
    // Shifted once, so that each token's test takes a constant bit: a 64-bit test per token had
    // ptxas keep 64-bit masks live across the score loop and schedule the softmax ahead of the
    // first mma (SASS, docs/sm80-decode.md item 28).
    const uint32_t my_bad = bad >> (2 * st.q());
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int j = nt * 8 + 2 * st.q() + (k & 1);
        if (tile_start + j >= bound[k / 2] || plan::bad_token(my_bad, nt * 8 + (k & 1)))
          acc[nt][k] = -INFINITY;
      }
    }
  }
}

// softmax_full_rows takes the row max over the (masked) tile without a barrier and writes P
// (p_tile) and alpha (alpha_rows); no branches, so that it schedules among the mma around it.
template <typename T, typename Cfg>
__device__ __forceinline__ void softmax_full_rows(float (&acc)[kBlockN / 8][4], ScoreState<Cfg>& st,
                                                  float scale_log2, T* p_tile, float* alpha_rows) {
  constexpr int kNTiles = kBlockN / 8;
  static_assert(Cfg::kSColGroups == 1 && Cfg::kSNTiles == kNTiles, "whole rows");
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    float new_max = st.max[e];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      new_max = fmaxf(new_max, fmaxf(acc[nt][2 * e], acc[nt][2 * e + 1]));
    }
    new_max = fmaxf(new_max, __shfl_xor_sync(0xffffffffu, new_max, 1));
    new_max = fmaxf(new_max, __shfl_xor_sync(0xffffffffu, new_max, 2));
    // Lazy rescaling: the running max moves only when the tile's exceeds it by more than
    // kLazyRescaleLog2 (P stays <= 2^kLazyRescaleLog2, well inside bf16 and fp16), so that after
    // the first tiles alpha is 1 and the output warps skip the rescale of O. The softmax is
    // invariant to the reference point; LSE uses the same one.
    if (st.max[e] != -INFINITY && (new_max - st.max[e]) * scale_log2 <= kLazyRescaleLog2) {
      new_max = st.max[e];
    }
    const float alpha = advance_row<Cfg>(st, e, new_max, scale_log2, acc);
    if (st.q() == 0) alpha_rows[st.row(e)] = alpha;
  }
  auto* s_p = reinterpret_cast<char*>(p_tile);
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      *reinterpret_cast<uint32_t*>(s_p + p_chunk_offset(st.row(e), nt) + 4 * st.q()) =
          pack2<T>(acc[nt][2 * e], acc[nt][2 * e + 1]);
    }
  }
}

}  // namespace mlakit::sm80
