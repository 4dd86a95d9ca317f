// The cpu reference of the lightning indexer's logits: per row and visible position, the 128-value
// dot products of the e4m3 query heads with the e4m3 key, times the key's scale, relu, weighted
// by the row's head weights and summed, all in double; -inf past the row's visible length.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/numeric.h"
#include "core/parallel.h"
#include "ops/indexer/indexer.h"
#include "ops/topk/topk.h"

namespace mlakit::ops {
namespace {

constexpr int64_t kChunk = 256;  // positions per work item

}  // namespace

Status indexer_logits_cpu(const IndexerLogitsArgs& a, int64_t ld) {
  for (int i = 0; i < a.batch; ++i) {
    const int64_t len = a.seq_lens[i];
    const int64_t most = std::min(a.max_len, a.block_table_stride * a.page_size);
    if (len < 0 || len > most) {
      return invalid_argument(str_cat("seq_lens[", i, "]"), str_cat("0..", most), len);
    }
    const int32_t* pages = a.block_table + i * a.block_table_stride;
    for (int64_t pg = 0; pg * a.page_size < len; ++pg) {
      if (pages[pg] < 0 || pages[pg] >= a.num_pages) {
        return invalid_argument(str_cat("block_table[", i, ", ", pg, "]"),
                                str_cat("a page id in 0..", a.num_pages - 1), pages[pg]);
      }
    }
  }
  // The query rows widened once: [b * next_n, heads, 128].
  const int64_t rows = int64_t{a.batch} * a.next_n;
  std::vector<float> q(static_cast<size_t>(rows) * a.heads * kIndexerDim);
  for (size_t e = 0; e < q.size(); ++e) q[e] = e4m3_to_float(a.q[e]);

  const size_t page_bytes = indexer_page_bytes(a.page_size);
  const auto* cache = static_cast<const uint8_t*>(a.index_cache);
  const int64_t chunks = (a.max_len + kChunk - 1) / kChunk;
  parallel_for(rows * chunks, [&](int64_t item) {
    const int64_t r = item / chunks;
    const int64_t j0 = item % chunks * kChunk;
    const int64_t j1 = std::min(a.max_len, j0 + kChunk);
    const int i = static_cast<int>(r / a.next_n);
    const int64_t visible =
        topk_row_length(a.seq_lens[i], a.next_n, static_cast<int>(r % a.next_n));
    const int32_t* pages = a.block_table + i * a.block_table_stride;
    const float* qr = q.data() + r * a.heads * kIndexerDim;
    const float* w = a.weights + r * a.heads;
    float* out = a.logits + r * ld;
    float k[kIndexerDim];
    for (int64_t j = j0; j < j1; ++j) {
      if (j >= visible) {
        out[j] = -std::numeric_limits<float>::infinity();
        continue;
      }
      const uint8_t* page = cache + pages[j / a.page_size] * page_bytes;
      const int64_t offset = j % a.page_size;
      float scale;
      std::memcpy(&scale, page + int64_t{a.page_size} * kIndexerDim + offset * 4, sizeof(scale));
      for (int d = 0; d < kIndexerDim; ++d) k[d] = e4m3_to_float(page[offset * kIndexerDim + d]);
      double sum = 0;
      for (int h = 0; h < a.heads; ++h) {
        double dot = 0;
        for (int d = 0; d < kIndexerDim; ++d) dot += double{qr[h * kIndexerDim + d]} * k[d];
        sum += double{w[h]} * std::max(0.0, dot * scale);
      }
      out[j] = static_cast<float>(sum);
    }
  });
  return Status::Ok();
}

}  // namespace mlakit::ops
