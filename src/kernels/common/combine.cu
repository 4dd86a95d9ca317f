// The combine kernel (combine.h). A grid of at most `max_ctas` CTAs of 128 threads walks the
// (request, row) pairs of the batch; a CTA skips the rows of requests with one chunk (the main
// kernel wrote them). For a split row, warp 0 computes the LSE over the row's partials (max, then
// sum of exp) and stages the weights exp(lse_partial - lse) in shared memory; then each thread
// sums one float4 of the 512 columns over the partials, several loads in flight. Two barriers
// per row: with many rows of few partials (batch 64, h_q 128) the per-row overhead is what
// counts; a variant with 512 threads per row and block-wide reductions was 2 us faster at batch
// 1 and 44 us slower at batch 64 (H200, 2026-11). Empty requests get zeros and -inf.
#include <algorithm>
#include <cmath>

#include "core/cuda_check.h"
#include "kernels/common/combine.h"
#include "kernels/common/numeric.cuh"
#include "kernels/common/pdl.h"

namespace mlakit {
namespace {

constexpr int kThreads = kDv / 4;  // one float4 of each row per thread
constexpr int kWindow = 1024;      // partials per pass (weights staged in shared memory)
static_assert(kThreads == 128);

template <typename T>
__global__ void __launch_bounds__(kThreads) combine_partials(const CombineParams p) {
  __shared__ float s_weight[kWindow];
  __shared__ float s_lse, s_scale;
  // Partials and metadata come from the previous kernels.
  pdl::griddepcontrol_wait();
  pdl::griddepcontrol_launch_dependents();
  const int64_t items = int64_t{p.batch} * p.rows;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int32_t request = static_cast<int32_t>(item / p.rows);
    const int32_t row = static_cast<int32_t>(item % p.rows);
    const plan::RequestMeta rm = p.requests[request];
    const int32_t splits = rm.num_splits;
    if (splits == 1) continue;  // uniform over the CTA
    const float* g_lse = p.partial_lse + int64_t{rm.split_offset} * p.rows + row;

    if (threadIdx.x < 32) {
      float lse = -INFINITY;
      float max_lse = -INFINITY;
      for (int32_t s = threadIdx.x; s < splits; s += 32) {
        max_lse = fmaxf(max_lse, g_lse[int64_t{s} * p.rows]);
      }
      max_lse = warp_max(max_lse);
      if (max_lse != -INFINITY) {
        float sum = 0.0f;
        for (int32_t s = threadIdx.x; s < splits; s += 32) {
          sum += exp2f((g_lse[int64_t{s} * p.rows] - max_lse) * kLog2e);
        }
        lse = max_lse + logf(warp_sum(sum));
        for (int32_t s = threadIdx.x; s < min(splits, kWindow); s += 32) {
          s_weight[s] = exp2f((g_lse[int64_t{s} * p.rows] - lse) * kLog2e);
        }
      }
      if (threadIdx.x == 0) {
        // out *= exp(lse) / (exp(lse) + exp(sink)); rows with no visible token stay 0.
        s_lse = lse;
        s_scale = p.sinks != nullptr && lse != -INFINITY
                      ? 1.0f / (1.0f + expf(p.sinks[row % p.h_q] - lse))
                      : 1.0f;
        if (p.lse != nullptr) p.lse[item] = lse;
      }
    }
    __syncthreads();
    const float lse = s_lse, scale = s_scale;

    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (lse != -INFINITY) {
      const int64_t split_stride = int64_t{p.rows} * kDv;
      const float* g_out =
          p.partial_out + (int64_t{rm.split_offset} * p.rows + row) * kDv + 4 * threadIdx.x;
      for (int32_t base = 0; base < splits; base += kWindow) {
        if (base > 0) {  // past the first window (over 1024 partials): stage the next weights
          __syncthreads();
          for (int32_t s = threadIdx.x; s < min(splits - base, kWindow); s += kThreads) {
            s_weight[s] = exp2f((g_lse[int64_t{base + s} * p.rows] - lse) * kLog2e);
          }
          __syncthreads();
        }
        const int32_t n = min(kWindow, splits - base);
#pragma unroll 8
        for (int32_t s = 0; s < n; ++s) {
          const float w = s_weight[s];
          const float4 v =
              __ldcs(reinterpret_cast<const float4*>(g_out + (base + s) * split_stride));
          acc.x += w * v.x;
          acc.y += w * v.y;
          acc.z += w * v.z;
          acc.w += w * v.w;
        }
      }
    }
    T* g_dst = static_cast<T*>(p.out) + item * kDv + 4 * threadIdx.x;
    *reinterpret_cast<uint2*>(g_dst) = {pack2<T>(acc.x * scale, acc.y * scale),
                                        pack2<T>(acc.z * scale, acc.w * scale)};
    __syncthreads();  // s_lse, s_scale and s_weight are rewritten for the next row
  }
}

}  // namespace

Status launch_combine(const CombineParams& params, DType out_dtype, int32_t max_ctas,
                      cudaStream_t stream, bool pdl) {
  const int64_t items = int64_t{params.batch} * params.rows;
  const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(items, max_ctas))));
  auto* kernel =
      out_dtype == DType::kBF16 ? combine_partials<__nv_bfloat16> : combine_partials<__half>;
  MLAKIT_CUDA_RETURN(pdl::launch(kernel, grid, dim3(kThreads), 0, stream, pdl, params));
  return Status::Ok();
}

}  // namespace mlakit
