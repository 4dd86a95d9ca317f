// The cpu backend's math: the exact reference of DESIGN.md ("The math") on host memory.
#pragma once

#include <cstdint>

#include "mlakit/mlakit.h"

namespace mlakit::cpu {

// Host memory one thread of attention() holds at most: the slots and scores of a block of query
// rows over the longest visible sequence (max_seq_len, or topk + extra_topk), plus its fixed rows.
uint64_t scratch_bytes(const Problem& problem);

// Computes out (and lse) for every request, token and head on at most `threads` threads. `args`
// passed check_host_data (core/data_check.h).
void attention(const Problem& problem, const RunArgs& args, int threads);

}  // namespace mlakit::cpu
