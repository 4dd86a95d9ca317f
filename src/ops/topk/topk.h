// Top-k selection as sparse-decode indices: the cpu reference and the CUDA launcher, called by
// src/ops/ops.cc after validation. Both order values by the key below and keep ties by the lower
// position, so their results are equal bit for bit.
#pragma once

#include <cstdint>

#include "mlakit/ops.h"
#include "ops/quant.h"

namespace mlakit::ops {

// A float's bits as an unsigned key in IEEE total order: -NaN < -inf < ... < -0 < +0 < ... <
// +inf < +NaN. Larger key = larger value.
MLAKIT_OPS_HD uint32_t order_key(float x) {
  const uint32_t b = bits_of(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The valid length of row t of a request of length `len` (the indexer's causal rule).
MLAKIT_OPS_HD int64_t topk_row_length(int64_t len, int32_t next_n, int32_t t) {
  const int64_t n = len - next_n + 1 + t;
  return n < 0 ? 0 : (n > len ? len : n);
}

// cpu reference: checks lengths and page ids first.
Status topk_indices_cpu(const TopkArgs& args, int64_t ld);
// CUDA (topk.cu): one block per row, radix select.
Status topk_indices_cuda(const TopkArgs& args, int64_t ld, Stream stream);

}  // namespace mlakit::ops
