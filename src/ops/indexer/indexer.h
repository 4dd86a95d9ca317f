// The lightning indexer's logits: the cpu reference, called by src/ops/ops.cc after validation.
#pragma once

#include <cstdint>

#include "mlakit/ops.h"

namespace mlakit::ops {

// Checks lengths and page ids first; accumulates in double.
Status indexer_logits_cpu(const IndexerLogitsArgs& args, int64_t ld);
// The GPU kernels (indexer.cu): fp8 wgmma on sm_90, mma.sync on sm_89 and sm_100+ (kUnsupported
// below sm_89 or without code for the device).
Status indexer_logits_cuda(const IndexerLogitsArgs& args, int64_t ld, Stream stream);

}  // namespace mlakit::ops
