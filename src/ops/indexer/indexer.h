// The lightning indexer's logits: the cpu reference, called by src/ops/ops.cc after validation.
#pragma once

#include <cstdint>

#include "mlakit/ops.h"

namespace mlakit::ops {

// Checks lengths and page ids first; accumulates in double.
Status indexer_logits_cpu(const IndexerLogitsArgs& args, int64_t ld);
// The GPU kernel (indexer.cu): fp8 mma.sync, sm_89 and newer (kUnsupported below).
Status indexer_logits_cuda(const IndexerLogitsArgs& args, int64_t ld, Stream stream);

}  // namespace mlakit::ops
