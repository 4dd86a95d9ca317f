// The LSE convention (mlakit.h, "LSE"): natural log, -inf and out 0 for an empty row, and the
// base-2 option (Problem::lse_base2): the cpu backend writes natural * log2(e) with the same
// outputs, -inf staying -inf; validation and describe know the field; the C API passes it;
// merge_partials takes and writes base-2 LSEs (MergeArgs::lse_base2) with the natural merge's
// results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu_run.h"
#include "harness/compare.h"
#include "harness/workload.h"
#include "mlakit/cp.h"
#include "mlakit/mlakit.h"
#include "mlakit/mlakit_c.h"
#include "status_match.h"

namespace mlakit_test {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.4426950408889634f;

Problem lse_problem(bool base2) {
  Problem p;
  p.h_q = 6;
  p.s_q = 2;
  p.page_size = 16;
  p.max_batch = 4;
  p.max_seq_len = 160;
  p.has_sinks = true;  // the sink uses the natural LSE; only the store changes
  p.return_lse = true;
  p.lse_base2 = base2;
  return p;
}

TEST(LseBase2, CpuWritesTheNaturalLseTimesLog2eAndTheSameOut) {
  // Length 0 (every row empty), 1 (with causal MTP, token 0 sees nothing), and longer ones.
  const std::vector<int32_t> lens = {0, 1, 37, 150};
  const HostInputs natural_in =
      mlakit::harness::make_inputs(lse_problem(false), lens, {.seed = case_seed()});
  HostInputs base2_in = natural_in;
  base2_in.problem.lse_base2 = true;
  const CpuRun natural = run_cpu(natural_in);
  const CpuRun base2 = run_cpu(base2_in);
  ASSERT_TRUE(natural.status.ok()) << natural.status.to_string();
  ASSERT_TRUE(base2.status.ok()) << base2.status.to_string();
  EXPECT_EQ(base2.out, natural.out) << "the base only changes the stored LSE";
  int empty = 0;
  for (size_t row = 0; row < natural.lse.size(); ++row) {
    if (natural.lse[row] == kNegInf) {
      ++empty;
      EXPECT_EQ(base2.lse[row], kNegInf) << row;
    } else {
      ASSERT_TRUE(std::isfinite(natural.lse[row])) << row;
      EXPECT_EQ(base2.lse[row], natural.lse[row] * kLog2e) << row;
    }
  }
  EXPECT_GE(empty, lse_problem(false).h_q * 3) << "the cases include empty rows";
}

TEST(LseBase2, NeedsReturnLseAndIsDescribed) {
  Problem p = lse_problem(true);
  EXPECT_TRUE(mlakit::validate(p).ok());
  EXPECT_NE(mlakit::describe(p).find(", lse base 2"), std::string::npos) << mlakit::describe(p);
  EXPECT_EQ(mlakit::describe(lse_problem(false)).find("base 2"), std::string::npos);
  p.return_lse = false;
  EXPECT_TRUE(is_error(mlakit::validate(p), StatusCode::kInvalidArgument, "lse_base2",
                       {"without return_lse"}));
}

TEST(LseBase2, CApiPassesTheOption) {
  const HostInputs in = mlakit::harness::make_inputs(lse_problem(true), std::vector<int32_t>{20, 0},
                                                     {.seed = case_seed()});
  const CpuRun want = run_cpu(in);
  ASSERT_TRUE(want.status.ok()) << want.status.to_string();

  mlakit_problem_t p;
  mlakit_problem_init(&p);
  EXPECT_EQ(p.lse_base2, 0);
  p.h_q = in.problem.h_q, p.s_q = in.problem.s_q, p.page_size = in.problem.page_size;
  p.max_batch = in.problem.max_batch, p.max_seq_len = in.problem.max_seq_len;
  p.has_sinks = 1, p.return_lse = 1, p.lse_base2 = 1;
  mlakit_decoder_t* d = nullptr;
  ASSERT_EQ(mlakit_decoder_create(&p, "cpu", &d), 0) << mlakit_last_error();
  std::vector<uint8_t> out(in.out_bytes());
  std::vector<float> lse(in.lse_count(), NAN);
  const RunArgs cpp = in.args(out.data(), lse.data());
  mlakit_run_args_t a;
  mlakit_run_args_init(&a);
  a.batch = cpp.batch;
  a.q = cpp.q;
  a.kv_cache = cpp.kv_cache;
  a.num_pages = cpp.num_pages;
  a.block_table = cpp.block_table;
  a.block_table_stride = cpp.block_table_stride;
  a.seq_lens = cpp.seq_lens;
  a.sinks = cpp.sinks;
  a.out = out.data();
  a.lse = lse.data();
  EXPECT_EQ(mlakit_decoder_run(d, &a, nullptr, 0, nullptr), 0) << mlakit_last_error();
  mlakit_decoder_destroy(d);
  EXPECT_EQ(out, want.out);
  EXPECT_EQ(std::memcmp(lse.data(), want.lse.data(), lse.size() * sizeof(float)), 0);

  p.lse_base2 = 1, p.return_lse = 0, p.has_sinks = 0;
  EXPECT_EQ(mlakit_decoder_create(&p, "cpu", &d), 1);
  EXPECT_EQ(std::string(mlakit_last_error()).rfind("invalid argument: lse_base2", 0), 0u)
      << mlakit_last_error();
}

// merge_partials over base-2 partial LSEs gives the natural merge's out and its LSE in base 2;
// an empty partial (-inf) still contributes nothing, an all-empty row stays neutral.
TEST(LseBase2, MergeTakesAndWritesBase2) {
  constexpr int kWorld = 3, kRows = 4;
  std::mt19937_64 rng(case_seed());
  std::uniform_real_distribution<float> value(-1.0f, 1.0f), logit(-4.0f, 6.0f);
  std::vector<float> partial_out(kWorld * kRows * mlakit::kDv);
  for (float& x : partial_out) x = value(rng);
  std::vector<float> natural(kWorld * kRows);
  for (float& x : natural) x = logit(rng);
  natural[1 * kRows + 0] = kNegInf;  // row 0: rank 1 empty, its values must not be read
  std::fill_n(&partial_out[(1 * kRows + 0) * mlakit::kDv], mlakit::kDv, NAN);
  for (int k = 0; k < kWorld; ++k) natural[k * kRows + 3] = kNegInf;  // row 3: all empty
  std::vector<float> base2(natural.size());
  for (size_t k = 0; k < natural.size(); ++k) base2[k] = natural[k] * kLog2e;
  const std::vector<float> sinks = {0.5f, kNegInf, 2.0f, -1.0f};

  auto merge = [&](const std::vector<float>& partial_lse, bool lse_base2, std::vector<float>* out,
                   std::vector<float>* lse) {
    out->assign(kRows * mlakit::kDv, NAN);
    lse->assign(kRows, NAN);
    const mlakit::MergeArgs m{.world = kWorld,
                              .batch = 1,
                              .s_q = 1,
                              .h_q = kRows,
                              .dtype = DType::kFP32,
                              .partial_out = partial_out.data(),
                              .partial_lse = partial_lse.data(),
                              .sinks = sinks.data(),
                              .out = out->data(),
                              .lse = lse->data(),
                              .lse_base2 = lse_base2};
    return mlakit::merge_partials(mlakit::ops::Device::kCpu, m);
  };
  std::vector<float> out_n, lse_n, out_2, lse_2;
  ASSERT_TRUE(merge(natural, false, &out_n, &lse_n).ok());
  ASSERT_TRUE(merge(base2, true, &out_2, &lse_2).ok());
  for (int row = 0; row < kRows; ++row) {
    if (row == 3) {
      EXPECT_EQ(lse_2[row], kNegInf);
    } else {
      EXPECT_NEAR(lse_2[row], lse_n[row] * kLog2e, 1e-5f * std::fabs(lse_n[row] * kLog2e) + 1e-6f)
          << row;
    }
    for (int d = 0; d < mlakit::kDv; ++d) {
      const float want = out_n[row * mlakit::kDv + d];
      ASSERT_NEAR(out_2[row * mlakit::kDv + d], want, 1e-5f * std::fabs(want) + 1e-6f)
          << row << " " << d;
    }
  }
  for (int d = 0; d < mlakit::kDv; ++d) ASSERT_EQ(out_2[3 * mlakit::kDv + d], 0.0f);

  mlakit_merge_args_t c;
  mlakit_merge_args_init(&c);
  EXPECT_EQ(c.lse_base2, 0);
}

// Context parallel with base 2 end to end: every rank's base-2 partial merged with lse_base2
// equals the unsharded base-2 decode.
TEST(LseBase2, ShardedRanksMergedInBase2EqualTheUnshardedDecode) {
  Problem gp = lse_problem(true);
  gp.has_sinks = false;
  const std::vector<int32_t> lens = {0, 5, 70, 150};
  const HostInputs global = mlakit::harness::make_inputs(gp, lens, {.seed = case_seed()});
  const CpuRun ref = run_cpu(global);
  ASSERT_TRUE(ref.status.ok()) << ref.status.to_string();
  constexpr int kWorld = 2, kInterleave = 16;
  const size_t out_bytes = global.out_bytes(), rows = global.lse_count();
  std::vector<uint8_t> partial_out(out_bytes * kWorld);
  std::vector<float> partial_lse(rows * kWorld);
  for (int r = 0; r < kWorld; ++r) {
    const HostInputs local = mlakit::harness::shard_inputs(global, kWorld, r, kInterleave);
    ASSERT_TRUE(local.problem.lse_base2);
    const CpuRun part = run_cpu(local);
    ASSERT_TRUE(part.status.ok()) << part.status.to_string();
    std::memcpy(&partial_out[r * out_bytes], part.out.data(), out_bytes);
    std::memcpy(&partial_lse[r * rows], part.lse.data(), rows * sizeof(float));
  }
  std::vector<uint8_t> out(out_bytes);
  std::vector<float> lse(rows, NAN);
  const mlakit::MergeArgs m{.world = kWorld,
                            .batch = global.batch,
                            .s_q = gp.s_q,
                            .h_q = gp.h_q,
                            .dtype = gp.out_dtype,
                            .partial_out = partial_out.data(),
                            .partial_lse = partial_lse.data(),
                            .out = out.data(),
                            .lse = lse.data(),
                            .lse_base2 = true};
  ASSERT_TRUE(mlakit::merge_partials(mlakit::ops::Device::kCpu, m).ok());
  const auto cmp = mlakit::harness::compare(gp, global.batch, out.data(), ref.out.data(),
                                            lse.data(), ref.lse.data());
  EXPECT_TRUE(cmp.passes(mlakit::harness::default_tolerance(gp))) << cmp.summary();
}

}  // namespace
}  // namespace mlakit_test
