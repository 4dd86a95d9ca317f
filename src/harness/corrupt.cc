#include "harness/corrupt.h"

#include <algorithm>
#include <limits>
#include <random>

#include "core/check.h"

namespace mlakit::harness {

namespace {

// The slots whose page can go: full, and before the first query token's causal bound.
std::vector<BadSlot> candidates_of(const HostInputs& in) {
  const Problem& p = in.problem;
  std::vector<BadSlot> candidates;
  if (p.sparse() || p.context_parallel()) return candidates;
  const int32_t lag = p.causal ? p.s_q - 1 : 0;
  // The length a run reads (the GPU backends clamp to these), so no slot lies past the row.
  const int64_t longest = std::min<int64_t>(p.max_seq_len, in.block_table_stride * p.page_size);
  for (int32_t i = 0; i < in.batch; ++i) {
    const int64_t bound = std::min<int64_t>(in.seq_lens[i], longest) - lag;
    for (int32_t slot = 0; (int64_t{slot} + 1) * p.page_size <= bound; ++slot) {
      candidates.push_back({.request = i, .slot = slot});
    }
  }
  return candidates;
}

}  // namespace

int64_t bad_page_room(const HostInputs& in) {
  return static_cast<int64_t>(candidates_of(in).size());
}

Status plant_bad_pages(HostInputs* in, int count, uint64_t seed, std::vector<BadSlot>* planted) {
  planted->clear();
  if (in->problem.sparse() || in->problem.context_parallel()) {
    return invalid_argument("problem",
                            "a dense problem without context parallelism (bad pages of a block "
                            "table with global lengths)",
                            in->problem.sparse() ? "sparse" : "cp_world > 1");
  }
  std::vector<BadSlot> candidates = candidates_of(*in);
  if (count < 0 || static_cast<size_t>(count) > candidates.size()) {
    return invalid_argument(
        "count", str_cat("0..", candidates.size(), " (full pages before every causal bound)"),
        count);
  }
  std::mt19937_64 rng(seed);
  std::shuffle(candidates.begin(), candidates.end(), rng);
  candidates.resize(static_cast<size_t>(count));
  std::sort(candidates.begin(), candidates.end(), [](const BadSlot& a, const BadSlot& b) {
    return a.request != b.request ? a.request < b.request : a.slot < b.slot;
  });
  const int32_t ids[] = {static_cast<int32_t>(std::min<int64_t>(in->num_pages, INT32_MAX)),
                         std::numeric_limits<int32_t>::max(), -5,
                         std::numeric_limits<int32_t>::min()};
  for (size_t k = 0; k < candidates.size(); ++k) {
    BadSlot& b = candidates[k];
    b.id = ids[k % 4];
    in->block_table[b.request * in->block_table_stride + b.slot] = b.id;
  }
  *planted = std::move(candidates);
  return Status::Ok();
}

HostInputs without_slots(const HostInputs& in, std::span<const BadSlot> planted) {
  HostInputs r = in;
  const int32_t page = in.problem.page_size;
  for (int32_t i = 0; i < in.batch; ++i) {
    const int32_t* row = in.block_table.data() + i * in.block_table_stride;
    int32_t* out = r.block_table.data() + i * in.block_table_stride;
    int64_t kept = 0, dropped = 0;
    for (int64_t slot = 0; slot < in.block_table_stride; ++slot) {
      const bool bad = std::any_of(planted.begin(), planted.end(), [&](const BadSlot& b) {
        return b.request == i && b.slot == slot;
      });
      if (bad) {
        ++dropped;
      } else {
        out[kept++] = row[slot];
      }
    }
    for (; kept < in.block_table_stride; ++kept) out[kept] = -1;
    r.seq_lens[i] = static_cast<int32_t>(in.seq_lens[i] - dropped * page);
  }
  return r;
}

}  // namespace mlakit::harness
