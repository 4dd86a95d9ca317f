// Epilogue of the sm80 decode kernel, once per chunk: the softmax denominators of the token
// groups are summed through shared memory; the score warps of token group 0 turn each row's
// (max, sum) into its LSE and output scale (1 / sum, times the sink factor when the chunk is the
// whole request); the output warps scale their accumulators and write either the final output
// (bf16/fp16; out may be a view, each row at its own offset) or an fp32 partial for the combine
// kernel. Rows with no visible token get 0 and LSE -inf (the written LSE in natural log or base
// 2, lse_scale; the partials' always natural).
#pragma once

#include <cmath>

#include "backends/sm80/config.h"
#include "backends/sm80/params.h"
#include "backends/sm80/pv.cuh"
#include "backends/sm80/qk_softmax.cuh"
#include "kernels/common/numeric.cuh"
#include "plan/work.cuh"

namespace mlakit::sm80 {

// Each row's LSE (to lse or the partial's LSE) and output scale (to s.row_scale; -1 for a row
// that is not written: past the rows, or past a var_q request's q_len), from the score
// warps' softmax state. With several token groups their denominators meet in shared memory
// (a barrier of all threads inside); with whole rows per warp (kSColGroups 1) only score threads
// may call it, and it has no barrier. scale_log2: the scores' scale (p.scale_log2, times the fp8
// dequantization scales of q and k); v_scale: the fp8 cache's scale of V (1 for 16-bit caches).
template <typename T, typename Cfg>
__device__ __forceinline__ void write_row_stats(const DecodeParams& p, SharedStorage<T, Cfg>& s,
                                                const plan::Chunk& c, int row0,
                                                const ScoreState<Cfg>& st, float scale_log2,
                                                float v_scale) {
  const bool direct = c.slot < 0;
  float sums[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    float sum = st.sum[e];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    sums[e] = sum;
    if (Cfg::kSColGroups > 1 && st.q() == 0) s.row_sum[st.tg()][st.row(e)] = sum;
  }
  if constexpr (Cfg::kSColGroups > 1) __syncthreads();

  // Lanes q 0 and 1 of the first token group's warps work out one row each (rows e = q), side by
  // side rather than one after the other.
  if (st.tg() == 0 && st.q() < 2) {
    const int e = st.q();
    const int row = st.row(e);
    const int r = row0 + row;  // row in the request
    float sum = 0.0f;
    if constexpr (Cfg::kSColGroups > 1) {
#pragma unroll
      for (int t = 0; t < Cfg::kSColGroups; ++t) sum += s.row_sum[t][row];
    } else {
      sum = e == 0 ? sums[0] : sums[1];
    }
    const bool any = sum > 0.0f;
    const float lse =
        any ? ((e == 0 ? st.max[0] : st.max[1]) * scale_log2 + log2f(sum)) * kLn2 : -INFINITY;
    float scale = any ? 1.0f / sum : 0.0f;
    // var_q: an out row past the request's q_len is not written; its scale says so (-1), so
    // that the output warps need not work it out again.
    bool written = r < p.rows;
    if (written) {
      if (direct) {
        if (p.sinks != nullptr && any) scale /= 1.0f + expf(p.sinks[r % p.h_q] - lse);
        written = r < p.out_view.live_rows(c.request, p.rows);
        if (p.lse != nullptr && written) {
          p.lse[p.out_view.lse_index(c.request, r, p.rows)] = lse * p.lse_scale;
        }
      } else {
        p.plan.partial_lse[int64_t{c.slot} * p.rows + r] = lse;
      }
    }
    s.row_scale[row] = written ? scale * v_scale : -1.0f;
  }
}

// The output warps' part of the epilogue, once s.row_scale is complete: the accumulators, scaled,
// to the output or the fp32 partial. warp: the output warp's index in the output layout.
template <typename T, typename Cfg>
__device__ __forceinline__ void write_output(const DecodeParams& p, const SharedStorage<T, Cfg>& s,
                                             const plan::Chunk& c, int row0,
                                             const OutAccumulators<Cfg>& o, int warp, int lane) {
  const bool direct = c.slot < 0;
  const int o_row0 = (warp / Cfg::kOColGroups) * Cfg::kORows;
  const int col0 = (warp % Cfg::kOColGroups) * Cfg::kOCols + 2 * (lane % 4);
  const int64_t first_row = int64_t{c.slot} * p.rows;  // of the partial
#pragma unroll
  for (int mt = 0; mt < Cfg::kOMTiles; ++mt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int row = o_row0 + mt * 16 + lane / 4 + 8 * e;
      const int r = row0 + row;
      const float scale = s.row_scale[row];
      if (r >= p.rows || scale < 0.0f) continue;  // (-1: var_q's absent rows, write_row_stats)
      if (direct) {
        // out may be a view: the row's own offset (plan::RowView).
        T* g_out = static_cast<T*>(p.out) + p.out_view.offset(c.request, r) + col0;
#pragma unroll
        for (int nt = 0; nt < Cfg::kONTiles; ++nt) {
          *reinterpret_cast<uint32_t*>(g_out + nt * 8) =
              pack2<T>(o[mt][nt][2 * e] * scale, o[mt][nt][2 * e + 1] * scale);
        }
      } else {
        float* g_out = p.plan.partial_out + (first_row + r) * kDv + col0;
#pragma unroll
        for (int nt = 0; nt < Cfg::kONTiles; ++nt) {
          *reinterpret_cast<float2*>(g_out + nt * 8) =
              make_float2(o[mt][nt][2 * e] * scale, o[mt][nt][2 * e + 1] * scale);
        }
      }
    }
  }
}

template <typename T, typename Cfg>
__device__ __forceinline__ void write_epilogue(const DecodeParams& p, SharedStorage<T, Cfg>& s,
                                               const plan::Chunk& c, int row0,
                                               const ScoreState<Cfg>& st,
                                               const OutAccumulators<Cfg>& o, int warp, int lane,
                                               float scale_log2, float v_scale) {
  write_row_stats<T, Cfg>(p, s, c, row0, st, scale_log2, v_scale);
  __syncthreads();
  write_output<T, Cfg>(p, s, c, row0, o, warp, lane);
}

}  // namespace mlakit::sm80
