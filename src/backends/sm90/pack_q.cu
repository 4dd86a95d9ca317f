// The q packing kernel (pack_q.h): a grid-stride loop over the 16-byte pieces of the rows, each
// thread one piece at a time (consecutive threads on consecutive pieces of a row, so a warp reads
// and writes whole 128-byte lines). Memory-bound and small: b 64, h_q 128, bf16 is 9.4 MB read
// and written. Not yet timed on a GPU.
#include <cuda_bf16.h>

#include <algorithm>

#include "backends/sm90/pack_q.h"
#include "core/cuda_check.h"
#include "kernels/common/fp8.cuh"
#include "kernels/common/pdl.h"

namespace mlakit::sm90 {
namespace {

constexpr int kThreads = 256;
constexpr int kCtasPerSm = 4;

__global__ void __launch_bounds__(kThreads) pack_q_kernel(const PackQParams p) {
  // q may be written by the previous kernel; the decode kernel reads what this one writes only
  // after its own wait (which covers this grid).
  pdl::griddepcontrol_wait();
  pdl::griddepcontrol_launch_dependents();
  const int32_t pieces = p.row_bytes / 16;
  const int64_t total = p.requests * p.rows * pieces;
  for (int64_t idx = int64_t{blockIdx.x} * kThreads + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * kThreads) {
    const int64_t row = idx / pieces;
    const int32_t piece = static_cast<int32_t>(idx - row * pieces);
    const int32_t request = static_cast<int32_t>(row / p.rows);
    const int32_t r = static_cast<int32_t>(row - int64_t{request} * p.rows);
    // var_q: rows past the request's q_len are zeros (nothing of q is read for them).
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < p.view.live_rows(request, p.rows)) {
      v = *reinterpret_cast<const uint4*>(p.q + p.view.offset(request, r) * p.elem_bytes +
                                          piece * 16);
    }
    *reinterpret_cast<uint4*>(p.packed + row * p.row_bytes + piece * 16) = v;
  }
}

constexpr int kSplitCols = kDqk;
constexpr int kSplitPieces = kSplitCols / 8;  // 16-byte pieces of 8 values a row
constexpr int kPiecesPerLane = (kSplitPieces + 31) / 32;

// The split (pack_q.h): a warp a row, three 16-byte pieces a lane at most; the row's largest
// magnitude by a warp max, then each piece's 8 values as 8 bytes of each part.
__global__ void __launch_bounds__(kThreads) split_q_kernel(const SplitQParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  __trap();  // the sm_80 pass of the build: the split runs only with the sm90 backend
#else
  pdl::griddepcontrol_wait();
  pdl::griddepcontrol_launch_dependents();
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t total = p.requests * p.rows;
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32);
  for (int64_t row = int64_t{blockIdx.x} * (kThreads / 32) + threadIdx.x / 32; row < total;
       row += warps) {
    const int32_t request = static_cast<int32_t>(row / p.rows);
    const int32_t r = static_cast<int32_t>(row - int64_t{request} * p.rows);
    const bool live = r < p.view.live_rows(request, p.rows);
    const uint8_t* src = p.q + p.view.offset(request, r) * 2;
    float x[kPiecesPerLane][8];
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < kPiecesPerLane; ++k) {
      const int piece = lane + 32 * k;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (live && piece < kSplitPieces) v = *reinterpret_cast<const uint4*>(src + piece * 16);
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[j]));
        x[k][2 * j] = f.x;
        x[k][2 * j + 1] = f.y;
        amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    // amax = m 2^e, m in [0.5, 1): times 2^(8 - e) it lies in [128, 256). Exponents clamped so
    // that both powers stay normal floats (a row that small or large is zeros or saturates).
    const int e = fp8::split_exponent(amax);
    const float up = ldexpf(1.0f, 8 - e);
    uint8_t* dst = p.packed + row * (2 * kSplitCols);
#pragma unroll
    for (int k = 0; k < kPiecesPerLane; ++k) {
      const int piece = lane + 32 * k;
      if (piece >= kSplitPieces) continue;
      uint32_t hi[2], lo[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint16_t h01, l01, h23, l23;
        fp8::split2(x[k][4 * j] * up, x[k][4 * j + 1] * up, h01, l01);
        fp8::split2(x[k][4 * j + 2] * up, x[k][4 * j + 3] * up, h23, l23);
        hi[j] = uint32_t{h01} | (uint32_t{h23} << 16);
        lo[j] = uint32_t{l01} | (uint32_t{l23} << 16);
      }
      *reinterpret_cast<uint2*>(dst + piece * 8) = make_uint2(hi[0], hi[1]);
      *reinterpret_cast<uint2*>(dst + kSplitCols + piece * 8) = make_uint2(lo[0], lo[1]);
    }
    if (lane == 0) p.row_scale[row] = ldexpf(1.0f, e - 8);
  }
#endif
}

}  // namespace

size_t split_q_scales_offset(const Problem& problem) {
  const size_t bytes = size_t(problem.max_batch) * problem.s_q * problem.h_q * 2 * kSplitCols;
  return (bytes + 255) / 256 * 256;
}

size_t split_q_bytes(const Problem& problem) {
  const size_t scales = size_t(problem.max_batch) * problem.s_q * problem.h_q * sizeof(float);
  return split_q_scales_offset(problem) + (scales + 255) / 256 * 256;
}

Status launch_split_q(const SplitQParams& params, int32_t sm_count, cudaStream_t stream, bool pdl) {
  const int64_t total = params.requests * params.rows;
  if (total < 1) return Status::Ok();
  const int64_t ctas = std::clamp<int64_t>((total + kThreads / 32 - 1) / (kThreads / 32), 1,
                                           int64_t{sm_count} * kCtasPerSm);
  MLAKIT_CUDA_RETURN(pdl::launch(split_q_kernel, dim3(static_cast<unsigned>(ctas)), dim3(kThreads),
                                 0, stream, pdl, params));
  return Status::Ok();
}

size_t packed_q_bytes(const Problem& problem) {
  const size_t bytes = size_t(problem.max_batch) * problem.s_q * problem.h_q * problem.d_qk *
                       dtype_bytes(problem.q_dtype);
  return (bytes + 255) / 256 * 256;
}

Status launch_pack_q(const PackQParams& params, int32_t sm_count, cudaStream_t stream, bool pdl) {
  const int64_t total = params.requests * params.rows * (params.row_bytes / 16);
  if (total < 1) return Status::Ok();
  const int64_t ctas =
      std::clamp<int64_t>((total + kThreads - 1) / kThreads, 1, int64_t{sm_count} * kCtasPerSm);
  MLAKIT_CUDA_RETURN(pdl::launch(pack_q_kernel, dim3(static_cast<unsigned>(ctas)), dim3(kThreads),
                                 0, stream, pdl, params));
  return Status::Ok();
}

}  // namespace mlakit::sm90
