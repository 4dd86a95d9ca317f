// The cpu backend's math: the exact reference of DESIGN.md ("The math") on host memory.
#pragma once

#include "mlakit/mlakit.h"

namespace mlakit::cpu {

// Checks the data-dependent parts of `args` that only host memory lets us read: sequence lengths
// against the block table, page ids against num_pages, sparse indices against the cache, sinks
// (not NaN) and scales passed by pointer (finite, > 0).
Status check_host_data(const Problem& problem, const RunArgs& args);

// Computes out (and lse) for every request, token and head. `args` passed check_host_data.
void attention(const Problem& problem, const RunArgs& args);

}  // namespace mlakit::cpu
