// The q packing kernel (pack_q.h): a grid-stride loop over the 16-byte pieces of the rows, each
// thread one piece at a time (consecutive threads on consecutive pieces of a row, so a warp reads
// and writes whole 128-byte lines). Memory-bound and small: b 64, h_q 128, bf16 is 9.4 MB read
// and written. Not yet timed on a GPU.
#include <algorithm>

#include "backends/sm90/pack_q.h"
#include "core/cuda_check.h"
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

}  // namespace

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
