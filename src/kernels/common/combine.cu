// The combine kernel (combine.h). A grid of at most `max_ctas` CTAs walks the (request, row) pairs
// of the batch; a CTA skips the rows of requests with one chunk (the main kernel wrote them). For
// a split row, warp 0 computes the LSE over the row's partials (max, then sum of exp) and each of
// the 128 threads sums one float4 of the 512 columns over the partials, weighted by
// exp(lse_partial - lse). The loop over partials keeps several loads in flight per thread: with
// few rows (batch 1) and many partials the kernel is latency-bound, not bandwidth-bound. Empty
// requests get zeros and -inf.
#include <algorithm>
#include <cmath>

#include "core/cuda_check.h"
#include "kernels/common/combine.h"
#include "kernels/common/numeric.cuh"
#include "kernels/common/pdl.h"

namespace mlakit {
namespace {

constexpr int kThreads = kDv / 4;  // one float4 of each row per thread
static_assert(kThreads == 128);

template <typename T>
__global__ void __launch_bounds__(kThreads) combine_partials(const CombineParams p) {
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
    __syncthreads();  // s_lse and s_scale are rewritten for the next row

    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (lse != -INFINITY) {
      const float* g_out =
          p.partial_out + (int64_t{rm.split_offset} * p.rows + row) * kDv + 4 * threadIdx.x;
      const int64_t split_stride = int64_t{p.rows} * kDv;
#pragma unroll 8
      for (int32_t s = 0; s < splits; ++s) {
        const float w = exp2f((g_lse[int64_t{s} * p.rows] - lse) * kLog2e);
        const float4 v = __ldcs(reinterpret_cast<const float4*>(g_out + s * split_stride));
        acc.x += w * v.x;
        acc.y += w * v.y;
        acc.z += w * v.z;
        acc.w += w * v.w;
      }
    }
    T* g_dst = static_cast<T*>(p.out) + item * kDv + 4 * threadIdx.x;
    *reinterpret_cast<uint2*>(g_dst) = {pack2<T>(acc.x * scale, acc.y * scale),
                                        pack2<T>(acc.z * scale, acc.w * scale)};
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
