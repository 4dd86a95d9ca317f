// The values of a run's data that validate_args cannot see without reading them: lengths against
// the block table, page ids against num_pages, sparse indices (and extra indices) against their
// cache, top-k lengths against topk, var_q's query offsets, sinks (not NaN) and scales passed by
// pointer (finite, > 0). The cpu backend checks every run so; for the GPU backends
// Decoder::check_data copies the data to the host and checks it the same way (a debugging aid: it
// synchronizes).
#pragma once

#include "mlakit/mlakit.h"

namespace mlakit {

// `args` points at host memory. The first value out of range as kInvalidArgument, naming it.
Status check_host_data(const Problem& problem, const RunArgs& args);

// With Problem::var_q: cu_seqlens_q[0:batch + 1] (host memory) starts at 0 and each query length
// cu_seqlens_q[i + 1] - cu_seqlens_q[i] is 0..s_q; else kInvalidArgument naming the entry.
Status check_cu_seqlens_q(const Problem& problem, const int32_t* cu_seqlens_q, int32_t batch);

// With Problem::var_q and the packed rows' count known (cu_seqlens_q[b], read on the host):
// validate_args' overlap checks again, with q, out, lse and the indices covering all their rows
// (validate_args, which cannot read the offsets, counts the first row only). validate.cc.
Status check_packed_rows_apart(const Problem& problem, const RunArgs& args, int64_t packed_rows);

}  // namespace mlakit
