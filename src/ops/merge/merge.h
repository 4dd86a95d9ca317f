// The merge of context-parallel partials (mlakit/cp.h): the cpu reference and the CUDA launcher,
// called by merge.cc after validation.
#pragma once

#include <cstdint>

#include "mlakit/cp.h"

namespace mlakit::cp {

// The rows b * s_q * h_q of each partial, and the elements from one partial to the next (the
// strides of MergeArgs, 0 meaning right after the previous partial).
inline int64_t merge_rows(const MergeArgs& a) { return int64_t{a.batch} * a.s_q * a.h_q; }
inline int64_t out_stride_of(const MergeArgs& a) {
  return a.partial_out_stride != 0 ? a.partial_out_stride : merge_rows(a) * kDv;
}
inline int64_t lse_stride_of(const MergeArgs& a) {
  return a.partial_lse_stride != 0 ? a.partial_lse_stride : merge_rows(a);
}

// cpu reference (merge_cpu.cc): host pointers, parallel over rows.
void merge_partials_cpu(const MergeArgs& args);
// CUDA (merge.cu; ops/no_cuda.cc without CUDA): one block per group of rows, on `stream`.
Status merge_partials_cuda(const MergeArgs& args, Stream stream);

}  // namespace mlakit::cp
