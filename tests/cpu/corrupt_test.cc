// The corrupted-block-table oracle of the GPU tests and `mlakit check --corrupt`
// (harness/corrupt.h): where bad ids are planted, and that the cpu reference of the inputs
// without those slots is attention over exactly the tokens of the good pages (cross-checked
// against a sparse run that lists those tokens).
#include "harness/corrupt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/check.h"
#include "cpu_run.h"
#include "harness/compare.h"

namespace mlakit_test {
namespace {

using mlakit::harness::BadSlot;

HostInputs inputs(int s_q, int page_size, std::vector<int32_t> lens, uint64_t seed) {
  Problem p;
  p.h_q = 4;
  p.s_q = s_q;
  p.page_size = page_size;
  p.max_batch = static_cast<int32_t>(lens.size());
  p.max_seq_len = *std::max_element(lens.begin(), lens.end());
  p.return_lse = true;
  return mlakit::harness::make_inputs(p, lens, {.seed = seed});
}

TEST(Corrupt, PlantsInFullPagesBeforeTheCausalBound) {
  HostInputs in = inputs(3, 16, {50, 0, 33, 200}, case_seed());
  // Full pages before L - 2: request 0 has 3 (48 <= 48), request 2 has 1 (16 <= 31; 32 > 31),
  // request 3 has 12.
  EXPECT_EQ(mlakit::harness::bad_page_room(in), 3 + 1 + 12);
  const std::vector<int32_t> before = in.block_table;
  std::vector<BadSlot> planted;
  ASSERT_TRUE(mlakit::harness::plant_bad_pages(&in, 9, case_seed(), &planted).ok());
  ASSERT_EQ(planted.size(), 9u);
  for (size_t k = 0; k < planted.size(); ++k) {
    const BadSlot& b = planted[k];
    if (k > 0) {
      const BadSlot& a = planted[k - 1];
      EXPECT_TRUE(a.request < b.request || (a.request == b.request && a.slot < b.slot));
    }
    EXPECT_TRUE(b.id < 0 || b.id >= in.num_pages) << b.id;
    EXPECT_LE((b.slot + 1) * 16, in.seq_lens[b.request] - 2);
    EXPECT_EQ(in.block_table[b.request * in.block_table_stride + b.slot], b.id);
  }
  int changed = 0;
  for (size_t k = 0; k < before.size(); ++k) changed += before[k] != in.block_table[k];
  EXPECT_EQ(changed, 9);
  // The cpu backend refuses the run, naming the first.
  const CpuRun r = run_cpu(in);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find(
                mlakit::str_cat("block_table[", planted[0].request, ", ", planted[0].slot, "]")),
            std::string::npos)
      << r.status.message();
}

TEST(Corrupt, RefusesWhatItCannotPlant) {
  HostInputs in = inputs(1, 64, {100, 60}, case_seed());
  std::vector<BadSlot> planted;
  EXPECT_EQ(mlakit::harness::bad_page_room(in), 1);
  EXPECT_EQ(mlakit::harness::plant_bad_pages(&in, 2, 1, &planted).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(planted.empty());
  // Context parallel: global lengths over a local table; nothing is planted.
  HostInputs cp = in;
  cp.problem.cp_world = 2;
  EXPECT_EQ(mlakit::harness::bad_page_room(cp), 0);
  EXPECT_EQ(mlakit::harness::plant_bad_pages(&cp, 1, 1, &planted).code(),
            StatusCode::kInvalidArgument);
  // Lengths past what the table addresses: only slots inside the row.
  HostInputs long_len = inputs(1, 16, {64}, case_seed());
  long_len.seq_lens[0] = 1 << 20;
  EXPECT_EQ(mlakit::harness::bad_page_room(long_len),
            std::min<int64_t>(long_len.problem.max_seq_len, long_len.block_table_stride * 16) / 16);
}

// The reference without the slots equals a sparse run over the tokens of the good pages (per
// query token, those before its causal bound): the same softmax, another path through the cpu
// backend.
void check_against_sparse(int s_q, int page_size, int count) {
  HostInputs in = inputs(s_q, page_size, {300, 17, 129, 64}, case_seed() + s_q + page_size);
  std::vector<BadSlot> planted;
  ASSERT_TRUE(mlakit::harness::plant_bad_pages(&in, count, case_seed(), &planted).ok());
  const CpuRun dense = run_cpu(mlakit::harness::without_slots(in, planted));
  ASSERT_TRUE(dense.status.ok()) << dense.status.to_string();

  HostInputs sparse = in;
  Problem& p = sparse.problem;
  p.topk = p.max_seq_len;
  sparse.indices.assign(static_cast<size_t>(in.batch) * s_q * p.topk, -1);
  for (int32_t i = 0; i < in.batch; ++i) {
    const int32_t len = in.seq_lens[i];
    for (int32_t t = 0; t < s_q; ++t) {
      const int32_t bound = len - (s_q - 1 - t);
      int32_t* row = sparse.indices.data() + (static_cast<size_t>(i) * s_q + t) * p.topk;
      int32_t n = 0;
      for (int32_t pos = 0; pos < bound; ++pos) {
        const int32_t id = in.block_table[i * in.block_table_stride + pos / page_size];
        if (id < 0 || id >= in.num_pages) continue;
        row[n++] = id * page_size + pos % page_size;
      }
    }
  }
  const CpuRun got = run_cpu(sparse);
  ASSERT_TRUE(got.status.ok()) << got.status.to_string();
  const mlakit::harness::Comparison cmp = mlakit::harness::compare(
      in.problem, in.batch, got.out.data(), dense.out.data(), got.lse.data(), dense.lse.data());
  EXPECT_TRUE(cmp.passes(mlakit::harness::default_tolerance(in.problem))) << cmp.summary();
  EXPECT_EQ(cmp.nonfinite, 0);
}

TEST(Corrupt, WithoutSlotsIsAttentionOverTheGoodPages) {
  check_against_sparse(1, 16, 10);
  check_against_sparse(2, 16, 8);
  check_against_sparse(1, 64, 4);
  check_against_sparse(3, 1, 100);
}

}  // namespace
}  // namespace mlakit_test
