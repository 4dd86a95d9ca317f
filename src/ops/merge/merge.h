// The merge of context-parallel partials (mlakit/cp.h): the cpu reference and the CUDA launcher,
// called by merge.cc after validation.
#pragma once

#include "mlakit/cp.h"

namespace mlakit::cp {

// cpu reference (merge_cpu.cc): host pointers, parallel over rows.
void merge_partials_cpu(const MergeArgs& args);
// CUDA (merge.cu; ops/no_cuda.cc without CUDA): one block per group of rows, on `stream`.
Status merge_partials_cuda(const MergeArgs& args, Stream stream);

}  // namespace mlakit::cp
