// The values of a run's data that validate_args cannot see without reading them: lengths against
// the block table, page ids against num_pages, sparse indices (and extra indices) against their
// cache, top-k lengths against topk, sinks (not NaN) and scales passed by pointer (finite, > 0).
// The cpu backend checks every run so; for the GPU backends Decoder::check_data copies the data
// to the host and checks it the same way (a debugging aid: it synchronizes).
#pragma once

#include "mlakit/mlakit.h"

namespace mlakit {

// `args` points at host memory. The first value out of range as kInvalidArgument, naming it.
Status check_host_data(const Problem& problem, const RunArgs& args);

}  // namespace mlakit
