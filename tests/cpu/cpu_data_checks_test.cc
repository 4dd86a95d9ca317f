// The checks of the data that the cpu backend makes, as it can read host memory (GPU backends
// cannot): page ids, sequence lengths, sparse indices and their lengths (main and extra cache),
// sinks and scales passed by pointer. Each refused with the element and its value named.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_run.h"
#include "harness/workload.h"
#include "mlakit/mlakit.h"

namespace mlakit_test {
namespace {

// ---------------------------------------------------------------------------------------------
// Data checks of the cpu backend (it can read host memory; GPU backends cannot)
// ---------------------------------------------------------------------------------------------

// Expects an invalid-argument status whose message starts with `arg` and contains `given`.
::testing::AssertionResult is_invalid(const Status& s, const std::string& arg,
                                      const std::string& given) {
  if (s.code() != StatusCode::kInvalidArgument) {
    return ::testing::AssertionFailure() << "expected invalid argument, got " << s.to_string();
  }
  if (s.message().rfind(arg, 0) != 0 || s.message().find("given " + given) == std::string::npos) {
    return ::testing::AssertionFailure() << "message \"" << s.message() << "\" should start with \""
                                         << arg << "\" and contain \"given " << given << "\"";
  }
  return ::testing::AssertionSuccess();
}

HostInputs small_dense(uint64_t seed) {
  const Problem p{.h_q = 4, .page_size = 16, .max_batch = 2, .max_seq_len = 128};
  return mlakit::harness::make_inputs(p, std::vector<int32_t>{20, 70}, {.seed = seed});
}

HostInputs small_sparse(uint64_t seed) {
  const Problem p{
      .h_q = 4, .s_q = 2, .page_size = 16, .max_batch = 2, .max_seq_len = 128, .topk = 8};
  return mlakit::harness::make_inputs(p, std::vector<int32_t>{20, 70},
                                      {.seed = seed, .topk_lens = true});
}

TEST(CpuDataChecks, PageIdOutOfRange) {
  HostInputs in = small_dense(case_seed());
  in.block_table[1 * in.block_table_stride + 4] =
      static_cast<int32_t>(in.num_pages);  // 70: 5 pages
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "block_table[1, 4]", std::to_string(in.num_pages)));
}

TEST(CpuDataChecks, SeqLenAboveMaxSeqLen) {
  // GPU workspaces are sized from max_seq_len: the reference refuses longer sequences.
  HostInputs in = small_dense(case_seed());
  in.problem.max_seq_len = 64;  // request 1 holds 70 tokens
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "seq_lens[1]", "70"));
}

TEST(CpuDataChecks, NegativePageId) {
  HostInputs in = small_dense(case_seed());
  in.block_table[0] = -1;
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "block_table[0, 0]", "-1"));
}

TEST(CpuDataChecks, SeqLenBeyondBlockTable) {
  HostInputs in = small_dense(case_seed());
  const int64_t too_long = in.block_table_stride * in.problem.page_size + 1;
  in.seq_lens[1] = static_cast<int32_t>(too_long);
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "seq_lens[1]", std::to_string(too_long)));
}

TEST(CpuDataChecks, NegativeSeqLen) {
  HostInputs in = small_dense(case_seed());
  in.seq_lens[0] = -3;
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "seq_lens[0]", "-3"));
}

TEST(CpuDataChecks, SparseIndexOutOfRange) {
  HostInputs in = small_sparse(case_seed());
  const int64_t slots = in.num_pages * in.problem.page_size;
  in.indices[1 * 2 * 8 + 8 + 5] = static_cast<int32_t>(slots);  // request 1, token 1, k 5
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "indices[1, 1, 5]", std::to_string(slots)));
}

TEST(CpuDataChecks, SparseIndexBelowMinusOne) {
  HostInputs in = small_sparse(case_seed());
  in.indices[3] = -2;
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "indices[0, 0, 3]", "-2"));
}

TEST(CpuDataChecks, TopkLensOutOfRange) {
  HostInputs in = small_sparse(case_seed());
  in.topk_lens[1] = 9;
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "topk_lens[1]", "9"));
}

HostInputs small_extra(uint64_t seed) {
  const Problem p{.h_q = 4,
                  .s_q = 2,
                  .d_qk = 512,
                  .page_size = 16,
                  .max_batch = 2,
                  .max_seq_len = 128,
                  .kv_dtype = DType::kFP8E4M3,
                  .kv_layout = KvLayout::kFp8V4,
                  .topk = 8,
                  .extra_topk = 6,
                  .extra_page_size = 4};
  return mlakit::harness::make_inputs(p, std::vector<int32_t>{5, 40},
                                      {.seed = seed, .topk_lens = true});
}

TEST(CpuDataChecks, ExtraIndexOutOfRange) {
  HostInputs in = small_extra(case_seed());
  const int64_t slots = in.extra_num_pages * 4;
  in.extra_indices[1 * 2 * 6 + 6 + 2] = static_cast<int32_t>(slots);  // request 1, token 1, k 2
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "extra_indices[1, 1, 2]", std::to_string(slots)));
  in = small_extra(case_seed());
  in.extra_indices[4] = -7;
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "extra_indices[0, 0, 4]", "-7"));
}

TEST(CpuDataChecks, ExtraTopkLensOutOfRange) {
  HostInputs in = small_extra(case_seed());
  in.extra_topk_lens[0] = 7;
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "extra_topk_lens[0]", "7"));
  in.extra_topk_lens[0] = -1;
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "extra_topk_lens[0]", "-1"));
}

// Sinks live in host memory for the cpu backend, so it checks them: a NaN sink made the head's
// output NaN. -inf (no sink) and +inf (the sink takes all the mass: out 0) are valid limits.
TEST(CpuDataChecks, NanSinkIsRefused) {
  Problem p{.h_q = 4, .page_size = 16, .max_batch = 2, .max_seq_len = 128, .has_sinks = true};
  HostInputs in = mlakit::harness::make_inputs(p, std::vector<int32_t>{20, 70}, {.seed = 3});
  in.sinks[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "sinks[2]", "nan"));
  in.sinks[2] = std::numeric_limits<float>::infinity();
  const CpuRun r = run_cpu(in);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  const auto* out = reinterpret_cast<const uint16_t*>(r.out.data());
  for (int d = 0; d < mlakit::kDv; ++d) EXPECT_EQ(out[2 * mlakit::kDv + d] & 0x7fff, 0) << d;
}

// Scales passed by pointer are in host memory for the cpu backend: it checks them as it checks
// host values (validate_args cannot read a pointer). 0, negative, NaN and inf scaled every
// output to NaN or zero.
TEST(CpuDataChecks, ScaleByPointerOutOfRangeIsRefused) {
  Problem p{.h_q = 4, .page_size = 16, .max_batch = 2, .max_seq_len = 128};
  p.q_dtype = p.kv_dtype = DType::kFP8E4M3;
  const HostInputs in = mlakit::harness::make_inputs(p, std::vector<int32_t>{20, 70}, {.seed = 4});
  for (const float bad : {0.0f, -0.5f, std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity()}) {
    const float good = 0.25f;
    const std::string given = (std::ostringstream() << bad).str();
    EXPECT_TRUE(is_invalid(run_cpu(in,
                                   [&](RunArgs& a) {
                                     a.q_scale = std::numeric_limits<float>::quiet_NaN();
                                     a.q_scale_ptr = &bad;
                                   })
                               .status,
                           "q_scale_ptr[0]", given));
    EXPECT_TRUE(is_invalid(run_cpu(in,
                                   [&](RunArgs& a) {
                                     a.k_scale = std::numeric_limits<float>::quiet_NaN();
                                     a.k_scale_ptr = &bad;
                                   })
                               .status,
                           "k_scale_ptr[0]", given));
    EXPECT_TRUE(run_cpu(in, [&](RunArgs& a) {
                  a.k_scale = std::numeric_limits<float>::quiet_NaN();
                  a.k_scale_ptr = &good;
                }).status.ok());
  }
}

}  // namespace
}  // namespace mlakit_test
