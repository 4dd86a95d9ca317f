// The local lengths and causal bounds of a context-parallel rank (cp_lengths.h).
#include <algorithm>

#include "core/cuda_check.h"
#include "kernels/common/pdl.h"
#include "mlakit/cp.h"
#include "plan/cp_lengths.h"

namespace mlakit::plan {
namespace {

constexpr int kThreads = 256;

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

__global__ void __launch_bounds__(kThreads) cp_lengths_kernel(const CpLengthsParams p) {
  pdl::griddepcontrol_wait();  // the lengths may come from the previous kernel
  for (int32_t i = blockIdx.x * kThreads + threadIdx.x; i < p.batch; i += gridDim.x * kThreads) {
    const int32_t len = p.seq_lens[i];
    // var_q: q_len clamped to 0..s_q, the difference taken in 64 bits (the offsets are trusted).
    const int32_t q_len =
        p.cu_seqlens_q == nullptr
            ? p.s_q
            : static_cast<int32_t>(
                  max(int64_t{0},
                      min(int64_t{p.cu_seqlens_q[i + 1]} - p.cu_seqlens_q[i], int64_t{p.s_q})));
    p.local_lens[i] = q_len > 0 ? p.lens.of(len) : 0;
    if (p.causal_bounds != nullptr) {
      for (int32_t t = 0; t < p.s_q; ++t) {
        p.causal_bounds[int64_t{i} * p.s_q + t] = p.lens.causal_bound(len, max(q_len - 1 - t, 0));
      }
    }
  }
  pdl::griddepcontrol_launch_dependents();
}

}  // namespace

Lengths cp_lengths(const Problem& given, int64_t table_tokens) {
  const int32_t max_len = given.max_seq_len;
  // I * N and r * I past max_len + 1 count as max_len + 1 (Lengths): no clamped length reaches it.
  const auto capped = [&](int64_t v) {
    return static_cast<int32_t>(std::min<int64_t>(v, int64_t{max_len} + 1));
  };
  return {.max_len = max_len,
          .max_local =
              static_cast<int32_t>(std::min<int64_t>(cp_local_max_seq_len(given), table_tokens)),
          .cp_round = capped(int64_t{given.cp_interleave} * given.cp_world),
          .cp_offset = capped(int64_t{given.cp_rank} * given.cp_interleave),
          .cp_interleave = given.cp_interleave};
}

size_t cp_lengths_bytes(const Problem& given) {
  if (!(given.context_parallel() || given.var_q) || given.sparse()) return 0;
  const size_t batch = static_cast<size_t>(given.max_batch);
  return align_up(sizeof(int32_t) * batch) + align_up(sizeof(int32_t) * batch * given.s_q);
}

CpLengthsParams cp_lengths_params(const Problem& given, const RunArgs& args, void* region) {
  auto* base = static_cast<uint8_t*>(region);
  const bool causal = given.causal && given.s_q > 1;
  return {.seq_lens = args.seq_lens,
          .local_lens = reinterpret_cast<int32_t*>(base),
          .causal_bounds =
              causal ? reinterpret_cast<int32_t*>(
                           base + align_up(sizeof(int32_t) * static_cast<size_t>(given.max_batch)))
                     : nullptr,
          .cu_seqlens_q = given.var_q ? args.cu_seqlens_q : nullptr,
          .batch = args.batch,
          .s_q = given.s_q,
          .lens = cp_lengths(given, args.block_table_stride * given.page_size)};
}

Status launch_cp_lengths(const CpLengthsParams& params, cudaStream_t stream, bool pdl) {
  const int32_t blocks = std::clamp((params.batch + kThreads - 1) / kThreads, 1, 64);
  MLAKIT_CUDA_RETURN(pdl::launch(cp_lengths_kernel, dim3(static_cast<unsigned>(blocks)),
                                 dim3(kThreads), 0, stream, pdl, params));
  return Status::Ok();
}

}  // namespace mlakit::plan
