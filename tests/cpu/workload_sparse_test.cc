// The test and benchmark workload's sparse indices as a top-k op emits them
// (harness::WorkloadOptions::sparse_tails, `mlakit bench --sparse-tails`): per query token,
// min(L, topk) distinct tokens of its request in increasing position, then -1; and the cpu
// backend decodes such inputs like the same indices with their lengths given.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "cpu_run.h"
#include "harness/workload.h"
#include "mlakit/mlakit.h"

namespace mlakit_test {
namespace {

Problem sparse_problem(int topk) {
  return Problem{.h_q = 4,
                 .s_q = 2,
                 .page_size = 16,
                 .max_batch = 5,
                 .max_seq_len = 400,
                 .q_dtype = DType::kBF16,
                 .kv_dtype = DType::kFP8E4M3,
                 .out_dtype = DType::kBF16,
                 .kv_layout = KvLayout::kFp8Blockwise,
                 .topk = topk};
}

TEST(WorkloadSparse, TailsAsATopkOpEmitsThem) {
  const int topk = 64;
  const Problem p = sparse_problem(topk);
  const std::vector<int32_t> lens = {0, 1, 40, 64, 333};
  const mlakit::harness::HostInputs in = mlakit::harness::make_inputs(
      p, lens, {.seed = case_seed(), .sparse_tails = true, .topk_lens = true});
  ASSERT_EQ(in.indices.size(), lens.size() * p.s_q * topk);
  ASSERT_EQ(in.topk_lens.size(), lens.size());
  for (size_t i = 0; i < lens.size(); ++i) {
    EXPECT_EQ(in.topk_lens[i], std::min(lens[i], topk));
    // A slot's position in request i (through its block table).
    std::map<int32_t, int64_t> position;
    for (int64_t pos = 0; pos < lens[i]; ++pos) {
      const int32_t page = in.block_table[i * in.block_table_stride + pos / p.page_size];
      position[page * p.page_size + static_cast<int32_t>(pos % p.page_size)] = pos;
    }
    for (int t = 0; t < p.s_q; ++t) {
      const int32_t* row = in.indices.data() + (i * p.s_q + t) * topk;
      const int kept = std::min(lens[i], topk);
      int64_t last = -1;
      for (int k = 0; k < topk; ++k) {
        if (k >= kept) {
          EXPECT_EQ(row[k], -1) << "request " << i << " token " << t << " entry " << k;
          continue;
        }
        const auto it = position.find(row[k]);
        ASSERT_NE(it, position.end()) << "request " << i << " entry " << k << ": slot " << row[k];
        EXPECT_GT(it->second, last) << "request " << i << " entry " << k;  // distinct, in order
        last = it->second;
      }
      if (lens[i] <= topk) EXPECT_EQ(last, lens[i] - 1);  // every token of a short request
    }
  }
}

// Without the lengths the -1 tails decode as the lengths given would: the same output and LSE
// (the cpu backend, the reference every GPU backend is compared with).
TEST(WorkloadSparse, TailsDecodeAsTheirLengths) {
  Problem p = sparse_problem(64);
  p.return_lse = true;
  const std::vector<int32_t> lens = {0, 9, 64, 150, 20};
  mlakit::harness::HostInputs tails = mlakit::harness::make_inputs(
      p, lens, {.seed = case_seed(), .sparse_tails = true, .topk_lens = false});
  mlakit::harness::HostInputs with_lens = mlakit::harness::make_inputs(
      p, lens, {.seed = case_seed(), .sparse_tails = true, .topk_lens = true});
  ASSERT_EQ(tails.indices, with_lens.indices);
  ASSERT_TRUE(tails.topk_lens.empty());
  const CpuRun a = run_cpu(tails), b = run_cpu(with_lens);
  ASSERT_TRUE(a.status.ok()) << a.status.to_string();
  ASSERT_TRUE(b.status.ok()) << b.status.to_string();
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.lse, b.lse);
  // Request 0 has no token: out 0, LSE -inf.
  EXPECT_TRUE(std::isinf(a.lse[0]) && a.lse[0] < 0);
}

}  // namespace
}  // namespace mlakit_test
