// The merge of context-parallel partials on the GPU (mlakit/cp.h); compared with the cpu
// reference (merge_cpu.cc) by tests/gpu/cp_merge_test.cc.
//
// Schedule: a 256-thread block merges 4 rows (request, token, head), 64 threads a row, 8
// consecutive values a thread (one 16-byte load per partial for bf16/fp16, two for fp32). The
// row's N partial LSEs go to shared memory once; every thread then derives the max and the
// weights itself (N <= 64 exps from broadcast reads, no second barrier), and skips the partials
// with lse -inf without reading their values. Memory-bound: it reads N x 1 KB (bf16) per row and
// writes 1 KB. 31-32 registers, no spills (ptxas, sm_90a). Partials may sit strides apart
// (MergeArgs::partial_out_stride, partial_lse_stride). Graph-capturable: the grid depends on the
// shape only; no host synchronization.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/check.h"
#include "core/cuda_check.h"
#include "core/numeric.h"
#include "ops/merge/merge.h"

namespace mlakit::cp {
namespace {

constexpr int kThreadsPerRow = 64;
constexpr int kRowsPerBlock = 4;
constexpr int kThreads = kThreadsPerRow * kRowsPerBlock;
constexpr int kValues = kDv / kThreadsPerRow;  // per thread
static_assert(kValues == 8, "a thread merges 8 consecutive values");
static_assert(kThreadsPerRow >= kMaxCpWorld, "a row's threads load its LSEs in one step");

struct MergeParams {
  const void* partial_out;   // N partials of [rows, 512], out_stride elements apart
  const float* partial_lse;  // N partials of [rows], lse_stride apart
  int64_t out_stride, lse_stride;
  const float* sinks;  // [h_q] or null
  void* out;           // [rows, 512]
  float* lse;          // [rows] or null
  int64_t rows;        // b * s_q * h_q
  int32_t world;       // N
  int32_t h_q;
  float lse_in;   // partial LSEs to natural log: 1, or ln 2 for base-2 ones (lse_base2)
  float lse_out;  // natural log to the written LSE: 1, or log2(e)
};

__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(float x) { return x; }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ float from_float(float x) {
  return x;
}

// 8 consecutive values of T as 16-byte vectors.
template <typename T>
struct Pack8 {
  static constexpr int kVecs = kValues * sizeof(T) / 16;
  static_assert(kVecs * 16 == kValues * sizeof(T), "8 values make whole 16-byte vectors");
  union {
    uint4 vec[kVecs];
    T value[kValues];
  };
};

template <typename T>
__global__ void __launch_bounds__(kThreads) merge_kernel(const MergeParams p) {
  __shared__ float s_lse[kRowsPerBlock][kMaxCpWorld];
  const int r = threadIdx.x / kThreadsPerRow, lane = threadIdx.x % kThreadsPerRow;
  const int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + r;
  const bool active = row < p.rows;
  if (lane < p.world) {
    s_lse[r][lane] = active ? p.partial_lse[lane * p.lse_stride + row] * p.lse_in : -INFINITY;
  }
  __syncthreads();
  if (!active) return;

  float m = -INFINITY;
  for (int k = 0; k < p.world; ++k) m = fmaxf(m, s_lse[r][k]);
  float r_acc[kValues] = {};
  float lse = -INFINITY, scale = 0.0f;  // every partial empty: out 0, lse -inf
  if (m != -INFINITY) {
    float sum = 0.0f;
    for (int k = 0; k < p.world; ++k) {
      const float lse_k = s_lse[r][k];
      if (lse_k == -INFINITY) continue;  // an empty partial: its values are not read
      const float w = __expf(lse_k - m);
      sum += w;
      Pack8<T> x;
      const uint4* g_src = reinterpret_cast<const uint4*>(static_cast<const T*>(p.partial_out) +
                                                          k * p.out_stride + row * kDv) +
                           lane * Pack8<T>::kVecs;
#pragma unroll
      for (int v = 0; v < Pack8<T>::kVecs; ++v) x.vec[v] = g_src[v];
#pragma unroll
      for (int i = 0; i < kValues; ++i) r_acc[i] += w * to_float(x.value[i]);
    }
    lse = m + __logf(sum);
    scale = 1.0f / sum;
    // out *= exp(lse) / (exp(lse) + exp(sink)) = 1 / (1 + exp(sink - lse))
    if (p.sinks != nullptr) scale /= 1.0f + __expf(p.sinks[row % p.h_q] - lse);
  }
  Pack8<T> y;
#pragma unroll
  for (int i = 0; i < kValues; ++i) y.value[i] = from_float<T>(r_acc[i] * scale);
  uint4* g_dst =
      reinterpret_cast<uint4*>(static_cast<T*>(p.out) + row * kDv) + lane * Pack8<T>::kVecs;
#pragma unroll
  for (int v = 0; v < Pack8<T>::kVecs; ++v) g_dst[v] = y.vec[v];
  if (p.lse != nullptr && lane == 0) p.lse[row] = lse * p.lse_out;
}

}  // namespace

Status merge_partials_cuda(const MergeArgs& a, Stream stream) {
  const int64_t rows = merge_rows(a);
  const MergeParams p{.partial_out = a.partial_out,
                      .partial_lse = a.partial_lse,
                      .out_stride = out_stride_of(a),
                      .lse_stride = lse_stride_of(a),
                      .sinks = a.sinks,
                      .out = a.out,
                      .lse = a.lse,
                      .rows = rows,
                      .world = a.world,
                      .h_q = a.h_q,
                      .lse_in = a.lse_base2 ? kLn2 : 1.0f,
                      .lse_out = a.lse_base2 ? kLog2e : 1.0f};
  const auto blocks = static_cast<unsigned>((p.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  switch (a.dtype) {
    case DType::kBF16: merge_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(p); break;
    case DType::kFP16: merge_kernel<__half><<<blocks, kThreads, 0, stream>>>(p); break;
    case DType::kFP32: merge_kernel<float><<<blocks, kThreads, 0, stream>>>(p); break;
    default: return invalid_argument("dtype", "bf16, fp16 or fp32", to_string(a.dtype));
  }
  MLAKIT_CUDA_RETURN_LAUNCH("merge_kernel");
  return Status::Ok();
}

}  // namespace mlakit::cp
