// The combine kernel (combine.h). A grid-stride loop over the (request, row) pairs of the batch;
// a CTA skips the rows of requests with one chunk (the main kernel wrote them) and writes zeros
// and -inf for empty requests. For a split row, each of the CTA's 128 x kSplitLanes threads owns
// one float4 of the 512 columns and one residue class of the splits (split s goes to split lane
// s % kSplitLanes):
//   1. every warp computes the row's LSE itself, in one pass over the partial LSEs (online max
//      and sum, lanes over splits), so no barrier and no shared memory stand between the LSEs
//      and the partial outputs;
//   2. each thread sums w_s * out_s over its splits, eight loads in flight, the weight
//      w_s = exp(lse_s - lse) from a broadcast load of lse_s (an L1 hit after step 1);
//   3. with several split lanes, the sums meet in shared memory and the first 128 threads add
//      them in a fixed order (the result does not depend on timing) and write the row.
// kSplitLanes 1 serves many rows (batch 8, h_q 128: 1024 rows of 8 splits), 4 and 8 few rows of
// many splits (batch 1: a whole GPU of partials for one request), where one lane per column would
// wait for k / 8 load round trips in sequence. A single pass merging LSEs and outputs online
// (running max, rescaled sums) was 1 to 2 us slower than these two (H200, 2026-11: batch 1,
// h_q 16: 4.9 us against 3.2). With more rows than CTAs, one lane and a row a warp instead
// (combine_row_warp: the LSE pass once a row, four float4s a lane; the CTA's warps take its split
// rows in turn; launch_for).
//
// out may be a view (RunArgs, "Views"): each row is written at its own offset (plan::RowView);
// lse is contiguous, in natural log or base 2 (lse_scale, Problem::lse_base2).
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/cuda_check.h"
#include "kernels/common/combine.h"
#include "kernels/common/numeric.cuh"
#include "kernels/common/pdl.h"

namespace mlakit {
namespace {

constexpr int kColumnThreads = kDv / 4;  // one float4 of each row per thread
static_assert(kColumnThreads == 128);

// CTAs per SM the kernel is compiled for (and launched with): 1024 threads, up to 64 registers
// each (eight float4 loads in flight per thread).
template <int kSplitLanes>
inline constexpr int kCtasPerSm = 1024 / (kColumnThreads * kSplitLanes);

// A row's LSE over its splits' partial LSEs (g_lse[s * stride]), by one whole warp in one pass
// (online max and sum, lanes over splits); every lane gets it. -inf for an empty request or a row
// with no visible token.
__device__ __forceinline__ float row_lse(const float* g_lse, int64_t stride, int32_t splits,
                                         int lane) {
  float max_lse = -INFINITY, sum = 0.0f;
  for (int32_t s = lane; s < splits; s += 32) {
    const float l = g_lse[s * stride];
    const float m = fmaxf(max_lse, l);
    if (m != -INFINITY) sum = sum * exp2f((max_lse - m) * kLog2e) + exp2f((l - m) * kLog2e);
    max_lse = m;
  }
  const float row_max = warp_max(max_lse);
  sum = max_lse == -INFINITY ? 0.0f : sum * exp2f((max_lse - row_max) * kLog2e);
  sum = warp_sum(sum);
  return row_max == -INFINITY ? -INFINITY : row_max + logf(sum);
}

// One split row (or an empty request's row): its LSE, the weighted sum of its partials, the
// sink factor; written to out and lse.
template <typename T, int kSplitLanes>
__device__ __forceinline__ void combine_row(
    const CombineParams& p, int32_t splits, int32_t split_offset, int32_t request, int32_t row,
    int column, int split_lane, int lane,
    float4 (&s_sum)[kSplitLanes > 1 ? kSplitLanes : 1][kColumnThreads]) {
  const int64_t stride = p.rows;
  const float* g_lse = p.partial_lse + int64_t{split_offset} * p.rows + row;

  // 1. LSE over the splits.
  const float lse = row_lse(g_lse, stride, splits, lane);

  // 2. This thread's share of the weighted sum.
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (lse != -INFINITY) {
    const float* g_out = p.partial_out + (int64_t{split_offset} * p.rows + row) * kDv + 4 * column;
#pragma unroll 8
    for (int32_t s = split_lane; s < splits; s += kSplitLanes) {
      const float w = exp2f((g_lse[s * stride] - lse) * kLog2e);
      const float4 v = __ldcs(reinterpret_cast<const float4*>(g_out + s * stride * kDv));
      acc.x += w * v.x;
      acc.y += w * v.y;
      acc.z += w * v.z;
      acc.w += w * v.w;
    }
  }
  if constexpr (kSplitLanes > 1) {
    // 3. The split lanes' sums, added in split-lane order.
    s_sum[split_lane][column] = acc;
    __syncthreads();
    if (split_lane == 0) {
#pragma unroll
      for (int l = 1; l < kSplitLanes; ++l) {
        const float4 v = s_sum[l][column];
        acc.x += v.x;
        acc.y += v.y;
        acc.z += v.z;
        acc.w += v.w;
      }
    }
    __syncthreads();  // s_sum is rewritten for the next row
  }
  if (split_lane == 0) {
    // out *= exp(lse) / (exp(lse) + exp(sink)); rows with no visible token stay 0.
    const float scale = p.sinks != nullptr && lse != -INFINITY
                            ? 1.0f / (1.0f + expf(p.sinks[row % p.h_q] - lse))
                            : 1.0f;
    // var_q: no row past the request's q_len is written (its partials, if any, are dropped).
    if (row < p.out_view.live_rows(request, p.rows)) {
      if (p.lse != nullptr && threadIdx.x == 0) {
        p.lse[p.out_view.lse_index(request, row, p.rows)] = lse * p.lse_scale;
      }
      T* g_dst = static_cast<T*>(p.out) + p.out_view.offset(request, row) + 4 * column;
      *reinterpret_cast<uint2*>(g_dst) = {pack2<T>(acc.x * scale, acc.y * scale),
                                          pack2<T>(acc.z * scale, acc.w * scale)};
    }
  }
}

// One split row (or an empty request's row) by one warp (one split lane, many rows): the row's
// LSE as in combine_row, then each lane's four float4s (columns 4 (lane + 32 j)), two splits'
// loads in flight; written to out and lse.
template <typename T>
__device__ __forceinline__ void combine_row_warp(const CombineParams& p, int32_t splits,
                                                 int32_t split_offset, int32_t request, int32_t row,
                                                 int lane) {
  const int64_t stride = p.rows;
  const float* g_lse = p.partial_lse + int64_t{split_offset} * p.rows + row;
  const float lse = row_lse(g_lse, stride, splits, lane);
  constexpr int kPerLane = kDv / 4 / 32;  // float4s of a row per lane
  float4 acc[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) acc[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (lse != -INFINITY) {
    const float* g_out = p.partial_out + (int64_t{split_offset} * p.rows + row) * kDv + 4 * lane;
#pragma unroll 2
    for (int32_t s = 0; s < splits; ++s) {
      const float w = exp2f((g_lse[s * stride] - lse) * kLog2e);
      const float* src = g_out + s * stride * kDv;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const float4 v = __ldcs(reinterpret_cast<const float4*>(src + 128 * j));
        acc[j].x += w * v.x;
        acc[j].y += w * v.y;
        acc[j].z += w * v.z;
        acc[j].w += w * v.w;
      }
    }
  }
  const float scale = p.sinks != nullptr && lse != -INFINITY
                          ? 1.0f / (1.0f + expf(p.sinks[row % p.h_q] - lse))
                          : 1.0f;
  if (row < p.out_view.live_rows(request, p.rows)) {
    if (p.lse != nullptr && lane == 0) {
      p.lse[p.out_view.lse_index(request, row, p.rows)] = lse * p.lse_scale;
    }
    T* g_dst = static_cast<T*>(p.out) + p.out_view.offset(request, row) + 4 * lane;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      *reinterpret_cast<uint2*>(g_dst + 128 * j) = {pack2<T>(acc[j].x * scale, acc[j].y * scale),
                                                    pack2<T>(acc[j].z * scale, acc[j].w * scale)};
    }
  }
}

// kWarpRows (one split lane): a row a warp (combine_row_warp), else a row a CTA (combine_row).
template <typename T, int kSplitLanes, bool kWarpRows = false>
__global__ void __launch_bounds__(kColumnThreads* kSplitLanes, kCtasPerSm<kSplitLanes>)
    combine_partials(const CombineParams p) {
  static_assert(!kWarpRows || kSplitLanes == 1, "a row a warp takes one split lane");
  __shared__ float4 s_sum[kSplitLanes > 1 ? kSplitLanes : 1][kColumnThreads];
  const int column = static_cast<int>(threadIdx.x) % kColumnThreads;
  const int split_lane = static_cast<int>(threadIdx.x) / kColumnThreads;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  // Partials and metadata come from the previous kernels.
  pdl::griddepcontrol_wait();
  pdl::griddepcontrol_launch_dependents();
  // A grid-stride loop over the items; each warp loads the metadata of 32 of the CTA's items at
  // once (the same in every warp) and the CTA takes the split ones in order (a row a warp: its
  // warps in turn). (One load per item, each waiting for the last, cost about 3 us at batch 64,
  // h_q 128 with nothing split: eight items per CTA.)
  // In 32 bits (items <= 2^31, launch_with checks it, and step = gridDim.x is at most 8 CTAs an
  // SM, so base + 32 * step cannot wrap): the request and row of an item are worked out once, by
  // its lane, and handed out with the metadata. With 64-bit divisions per row instead, batch 32,
  // h_q 128 (two splits a row) took 5.55 M warp instructions against 4.23 M, and the whole call
  // 1-2% longer from batch 1 to 32 (H200, 2026-11-29; bench/results/2026-11-29-h200-combine).
  const uint32_t items = static_cast<uint32_t>(p.batch) * static_cast<uint32_t>(p.rows);
  const uint32_t step = gridDim.x;
  for (uint32_t base = blockIdx.x; base < items; base += 32 * step) {
    const uint32_t mine = base + lane * step;
    int32_t my_splits = 1, my_offset = 0, my_request = 0, my_row = 0;
    bool live = false;
    if (mine < items) {
      my_request = static_cast<int32_t>(mine / static_cast<uint32_t>(p.rows));
      my_row = static_cast<int32_t>(mine) - my_request * p.rows;
      const plan::RequestMeta rm = p.requests[my_request];
      my_splits = rm.num_splits;
      my_offset = rm.split_offset;
      // var_q: a row past the request's q_len is never written, and its partials may not exist
      // (a query tile with no live row runs no chunk: ChunkIterator::skip_dead_tiles).
      live = my_row < p.out_view.live_rows(my_request, p.rows);
    }
    // Live split rows, and the rows of empty requests (zeros and -inf): the same in every warp.
    uint32_t todo = __ballot_sync(0xffffffffu, my_splits != 1 && live);
    if constexpr (kSplitLanes == 1 && kWarpRows) {
      // A row a warp, the CTA's warps taking the split rows in turn.
      constexpr int kWarps = kColumnThreads / 32;
      const int warp = static_cast<int>(threadIdx.x) / 32;
      for (int turn = 0; todo != 0; ++turn) {
        const int k = __ffs(todo) - 1;
        todo &= todo - 1;
        if (turn % kWarps != warp) continue;
        combine_row_warp<T>(
            p, __shfl_sync(0xffffffffu, my_splits, k), __shfl_sync(0xffffffffu, my_offset, k),
            __shfl_sync(0xffffffffu, my_request, k), __shfl_sync(0xffffffffu, my_row, k), lane);
      }
    } else {
      while (todo != 0) {
        const int k = __ffs(todo) - 1;
        todo &= todo - 1;
        combine_row<T, kSplitLanes>(
            p, __shfl_sync(0xffffffffu, my_splits, k), __shfl_sync(0xffffffffu, my_offset, k),
            __shfl_sync(0xffffffffu, my_request, k), __shfl_sync(0xffffffffu, my_row, k), column,
            split_lane, lane, s_sum);
      }
    }
  }
}

template <typename T, int kSplitLanes, bool kWarpRows = false>
Status launch_with(const CombineParams& params, int32_t sm_count, cudaStream_t stream, bool pdl) {
  // Enough CTAs to fill every SM; each loops over the rows.
  const int64_t items = int64_t{params.batch} * params.rows;
  if (items > int64_t{1} << 31) {
    return invalid_argument("combine's batch x rows", "at most 2^31",
                            str_cat(params.batch, " x ", params.rows));
  }
  const int64_t max_ctas = int64_t{sm_count} * kCtasPerSm<kSplitLanes>;
  const dim3 grid(static_cast<unsigned>(std::clamp<int64_t>(items, 1, max_ctas)));
  MLAKIT_CUDA_RETURN(pdl::launch(combine_partials<T, kSplitLanes, kWarpRows>, grid,
                                 dim3(kColumnThreads * kSplitLanes), 0, stream, pdl, params));
  return Status::Ok();
}

template <typename T>
Status launch_for(const CombineParams& params, int32_t sm_count, cudaStream_t stream, bool pdl) {
  // More split lanes when the rows are too few to fill the GPU at one CTA of 128 threads each:
  // eight up to one row per SM, four up to two. Batch 1, h_q 128 (128 rows of 64 partials), whole
  // call, one-shot: 24.2 us with eight against 25.8 with four (though the combine alone, replayed
  // back to back, was 0.3 us slower). Batch 8, h_q 128 (1024 rows of 8 partials): the combine
  // took 9 us with four lanes against 4.5 with one (H200, 2026-11). With one lane, a row a warp
  // once the rows outnumber the CTAs (eight an SM), so that a CTA's warps take its rows at once,
  // each warp's LSE pass serving the whole row: batch 32, h_q 128 (4096 rows, two splits each)
  // 6.6-7.4 us against 9.1-10.2 (ncu; 1.8 M warp instructions against 4.2 M), the whole call 2%
  // faster (ragged lengths 3%), h_q 64 batch 32 2-3%, batch 128 within 1% either way; at batch 8
  // (h_q 128: 1024 rows of eight splits, about one a CTA; h_q 64: 512 rows) the warp's serial
  // splits made the call 0.3-2.3% slower, so a row a CTA stays there (H200,
  // bench/results/2026-11-29-h200-combine, call 11).
  const int64_t rows = int64_t{params.batch} * params.rows;
  if (rows <= sm_count) return launch_with<T, 8>(params, sm_count, stream, pdl);
  if (rows < 2 * int64_t{sm_count}) return launch_with<T, 4>(params, sm_count, stream, pdl);
  if (rows <= int64_t{sm_count} * kCtasPerSm<1>) {
    return launch_with<T, 1>(params, sm_count, stream, pdl);
  }
  return launch_with<T, 1, true>(params, sm_count, stream, pdl);
}

}  // namespace

Status launch_combine(const CombineParams& params, DType out_dtype, int32_t sm_count,
                      cudaStream_t stream, bool pdl) {
  return out_dtype == DType::kBF16 ? launch_for<__nv_bfloat16>(params, sm_count, stream, pdl)
                                   : launch_for<__half>(params, sm_count, stream, pdl);
}

}  // namespace mlakit
