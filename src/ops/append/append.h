// Cache append: the cpu reference and the CUDA launchers. The public entry points
// (src/ops/ops.cc) validate the arguments and call these; `ld` is the input's row stride in
// elements, already resolved from its 0 default.
#pragma once

#include "mlakit/mlakit.h"
#include "mlakit/ops.h"

namespace mlakit::ops {

// cpu reference: checks every slot first, then writes (multithreaded over tokens).
Status append_kv_cpu(const AppendKvArgs& args, int64_t ld);
Status append_indexer_cpu(const AppendIndexerArgs& args, int64_t ld);

// CUDA (append.cu): one warp per token, slots out of range skipped.
Status append_kv_cuda(const AppendKvArgs& args, int64_t ld, Stream stream);
Status append_indexer_cuda(const AppendIndexerArgs& args, int64_t ld, Stream stream);

}  // namespace mlakit::ops
