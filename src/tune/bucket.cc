#include "tune/bucket.h"

#include <algorithm>
#include <bit>

#include "core/check.h"

namespace mlakit::tune {

int batch_bucket(int batch) {
  batch = std::max(batch, 1);
  if (batch <= 256) return static_cast<int>(std::bit_ceil(static_cast<unsigned>(batch)));
  return (batch + 255) / 256 * 256;
}

int batch_bucket_index(int batch) {
  const int bucket = batch_bucket(batch);
  if (bucket <= 256) return std::countr_zero(static_cast<unsigned>(bucket));
  return 8 + bucket / 256 - 1;
}

int batch_bucket_at(int index) { return index <= 8 ? 1 << index : (index - 7) * 256; }

int len_bucket(int max_seq_len) {
  return static_cast<int>(std::bit_ceil(static_cast<unsigned>(std::max(max_seq_len, 1))));
}

std::string problem_key(const Problem& p) {
  return str_cat(
      "h", p.h_q, ".s", p.s_q, ".p", p.page_size, ".q-", to_string(p.q_dtype), ".kv-",
      to_string(p.kv_dtype), ".out-", to_string(p.out_dtype), ".", to_string(p.kv_layout),
      p.causal ? ".causal" : ".noncausal", ".sinks", int{p.has_sinks}, ".lse", int{p.return_lse},
      ".pdl", int{p.enable_pdl}, ".topk", p.topk,
      // Only when used, so that the keys of caches written before them still match.
      p.has_extra() ? str_cat(".extra", p.extra_topk, ".ep", p.extra_page_size_or_default())
                    : std::string(),
      p.context_parallel() ? str_cat(".cp", p.cp_world, "r", p.cp_rank, "i", p.cp_interleave)
                           : std::string(),
      p.var_q ? ".varq" : "");
}

std::string bucket_key(const Problem& p, int batch_bucket, int len_bucket) {
  return str_cat(problem_key(p), "|b", batch_bucket, "|L", len_bucket);
}

}  // namespace mlakit::tune
