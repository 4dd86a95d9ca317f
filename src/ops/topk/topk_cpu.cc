// The cpu reference of top-k selection: per row, a partial sort of (key, position) pairs by key
// descending and position ascending, the k first kept and written in position order.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/parallel.h"
#include "ops/topk/topk.h"

namespace mlakit::ops {

Status topk_indices_cpu(const TopkArgs& a, int64_t ld) {
  for (int i = 0; i < a.batch; ++i) {
    const int64_t len = a.seq_lens[i];
    if (len < 0 || len > a.max_len) {
      return invalid_argument(str_cat("seq_lens[", i, "]"), str_cat("0..", a.max_len), len);
    }
    const int32_t* pages = a.block_table + i * a.block_table_stride;
    for (int64_t pg = 0; pg * a.page_size < len; ++pg) {
      const int64_t last_slot = int64_t{pages[pg]} * a.page_size + a.page_size - 1;
      if (pages[pg] < 0 || last_slot > std::numeric_limits<int32_t>::max()) {
        return invalid_argument(
            str_cat("block_table[", i, ", ", pg, "]"),
            str_cat("a page id >= 0 whose slots fit in int32 (page_size ", a.page_size, ")"),
            pages[pg]);
      }
    }
  }
  const int64_t rows = int64_t{a.batch} * a.next_n;
  parallel_for(rows, [&](int64_t r) {
    const int i = static_cast<int>(r / a.next_n);
    const int t = static_cast<int>(r % a.next_n);
    const int64_t n = topk_row_length(a.seq_lens[i], a.next_n, t);
    const float* row = a.logits + r * ld;
    std::vector<int64_t> kept;
    if (n <= a.k) {
      kept.resize(n);
      for (int64_t j = 0; j < n; ++j) kept[j] = j;
    } else {
      std::vector<std::pair<uint32_t, int64_t>> order(n);
      for (int64_t j = 0; j < n; ++j) order[j] = {order_key(row[j]), j};
      const auto first = [](const auto& x, const auto& y) {
        return x.first != y.first ? x.first > y.first : x.second < y.second;
      };
      std::nth_element(order.begin(), order.begin() + (a.k - 1), order.end(), first);
      kept.resize(a.k);
      for (int64_t m = 0; m < a.k; ++m) kept[m] = order[m].second;
      std::sort(kept.begin(), kept.end());
    }
    const int32_t* pages = a.block_table + i * a.block_table_stride;
    int32_t* indices = a.indices + r * a.k;
    int32_t* positions = a.positions != nullptr ? a.positions + r * a.k : nullptr;
    for (int64_t m = 0; m < a.k; ++m) {
      const bool used = m < static_cast<int64_t>(kept.size());
      const int64_t p = used ? kept[m] : -1;
      indices[m] = used ? static_cast<int32_t>(int64_t{pages[p / a.page_size]} * a.page_size +
                                               p % a.page_size)
                        : -1;
      if (positions != nullptr) positions[m] = static_cast<int32_t>(p);
    }
  });
  return Status::Ok();
}

}  // namespace mlakit::ops
