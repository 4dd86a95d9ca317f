// The C API (include/mlakit/mlakit_c.h) over the cpu backend: defaults, results equal to the C++
// API, and errors that name the argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu_run.h"
#include "harness/workload.h"
#include "mlakit/cp.h"
#include "mlakit/mlakit.h"
#include "mlakit/mlakit_c.h"

namespace mlakit_test {
namespace {

static_assert(MLAKIT_BF16 == static_cast<int>(DType::kBF16) &&
              MLAKIT_FP16 == static_cast<int>(DType::kFP16) &&
              MLAKIT_FP8_E4M3 == static_cast<int>(DType::kFP8E4M3) &&
              MLAKIT_FP32 == static_cast<int>(DType::kFP32));
static_assert(MLAKIT_KV_DENSE == static_cast<int>(KvLayout::kDense) &&
              MLAKIT_KV_FP8_BLOCKWISE == static_cast<int>(KvLayout::kFp8Blockwise) &&
              MLAKIT_KV_FP8_V4 == static_cast<int>(KvLayout::kFp8V4));

mlakit_problem_t to_c(const Problem& p) {
  mlakit_problem_t c;
  mlakit_problem_init(&c);
  c.h_q = p.h_q, c.s_q = p.s_q, c.page_size = p.page_size, c.max_batch = p.max_batch;
  c.max_seq_len = p.max_seq_len, c.q_dtype = static_cast<int32_t>(p.q_dtype);
  c.kv_dtype = static_cast<int32_t>(p.kv_dtype), c.out_dtype = static_cast<int32_t>(p.out_dtype);
  c.kv_layout = static_cast<int32_t>(p.kv_layout), c.causal = p.causal;
  c.has_sinks = p.has_sinks, c.topk = p.topk, c.return_lse = p.return_lse;
  c.d_qk = p.d_qk, c.extra_topk = p.extra_topk, c.extra_page_size = p.extra_page_size;
  c.cp_world = p.cp_world, c.cp_rank = p.cp_rank, c.cp_interleave = p.cp_interleave;
  c.lse_base2 = p.lse_base2, c.var_q = p.var_q;
  return c;
}

TEST(CApi, InitGivesTheCppDefaults) {
  mlakit_problem_t c;
  mlakit_problem_init(&c);
  const Problem p;
  EXPECT_EQ(c.h_q, p.h_q);
  EXPECT_EQ(c.s_q, p.s_q);
  EXPECT_EQ(c.d_qk, 576);
  EXPECT_EQ(c.d_v, 512);
  EXPECT_EQ(c.page_size, p.page_size);
  EXPECT_EQ(c.q_dtype, MLAKIT_BF16);
  EXPECT_EQ(c.kv_layout, MLAKIT_KV_DENSE);
  EXPECT_EQ(c.causal, 1);
  EXPECT_EQ(c.extra_topk, 0);
  EXPECT_EQ(c.extra_page_size, 0);
  EXPECT_EQ(c.cp_world, 1);
  EXPECT_EQ(c.cp_rank, 0);
  EXPECT_EQ(c.cp_interleave, 1);
  EXPECT_EQ(c.lse_base2, 0);
  EXPECT_EQ(c.var_q, 0);
  mlakit_run_args_t a;
  mlakit_run_args_init(&a);
  EXPECT_EQ(a.softmax_scale, mlakit::kDefaultSoftmaxScale);
  EXPECT_TRUE(std::isnan(a.q_scale) && std::isnan(a.k_scale));
  EXPECT_EQ(a.q, nullptr);
  EXPECT_EQ(a.q_scale_ptr, nullptr);
  EXPECT_EQ(a.extra_kv_cache, nullptr);
  EXPECT_EQ(a.extra_num_pages, 0);
  EXPECT_EQ(a.extra_indices, nullptr);
  EXPECT_EQ(a.extra_topk_lens, nullptr);
  EXPECT_EQ(a.cu_seqlens_q, nullptr);
}

struct CApiCase {
  const char* name;
  Problem problem;
};

void PrintTo(const CApiCase& c, std::ostream* os) { *os << c.name; }

class CApiTest : public ::testing::TestWithParam<CApiCase> {};

TEST_P(CApiTest, RunMatchesCppApi) {
  const Problem p = GetParam().problem;
  const HostInputs in = mlakit::harness::make_inputs(p, std::vector<int32_t>{0, 17, 90},
                                                     {.seed = case_seed(), .topk_lens = true});
  const CpuRun cpp = run_cpu(in);
  ASSERT_TRUE(cpp.status.ok()) << cpp.status.to_string();

  const mlakit_problem_t cp = to_c(p);
  mlakit_decoder_t* decoder = nullptr;
  ASSERT_EQ(mlakit_decoder_create(&cp, "cpu", &decoder), 0) << mlakit_last_error();
  const std::unique_ptr<mlakit_decoder_t, void (*)(mlakit_decoder_t*)> owner(
      decoder, mlakit_decoder_destroy);
  EXPECT_STREQ(mlakit_last_error(), "");
  EXPECT_STREQ(mlakit_decoder_backend(decoder), "cpu");
  EXPECT_EQ(mlakit_decoder_workspace_bytes(decoder), 0u);

  // Poisoned as run_cpu poisons its own: var_q leaves the rows past the packed ones as they are.
  std::vector<uint8_t> out(in.out_bytes());
  mlakit::harness::fill_nan(out.data(), in.out_bytes() / mlakit::dtype_bytes(p.out_dtype),
                            p.out_dtype);
  std::vector<float> lse(in.lse_count(), NAN);
  const RunArgs a = in.args(out.data(), lse.data());
  mlakit_run_args_t ca;
  mlakit_run_args_init(&ca);
  ca.batch = a.batch, ca.q = a.q, ca.kv_cache = a.kv_cache, ca.num_pages = a.num_pages;
  ca.block_table = a.block_table, ca.block_table_stride = a.block_table_stride;
  ca.seq_lens = a.seq_lens, ca.indices = a.indices, ca.topk_lens = a.topk_lens;
  ca.sinks = a.sinks, ca.out = a.out, ca.lse = a.lse, ca.softmax_scale = a.softmax_scale;
  ca.q_scale = a.q_scale, ca.k_scale = a.k_scale;
  ca.extra_kv_cache = a.extra_kv_cache, ca.extra_num_pages = a.extra_num_pages;
  ca.extra_indices = a.extra_indices, ca.extra_topk_lens = a.extra_topk_lens;
  ca.cu_seqlens_q = a.cu_seqlens_q;
  ASSERT_EQ(mlakit_decoder_run(decoder, &ca, nullptr, 0, nullptr), 0) << mlakit_last_error();

  EXPECT_EQ(out, cpp.out);
  if (p.return_lse) {
    EXPECT_EQ(std::memcmp(lse.data(), cpp.lse.data(), lse.size() * sizeof(float)), 0);
  }
}

// Outside the macro, which would split the braced lists at their commas.
const CApiCase kCApiCases[] = {
    {"context_parallel_rank",
     {.h_q = 8,
      .s_q = 2,
      .page_size = 16,
      .max_batch = 3,
      .max_seq_len = 128,
      .return_lse = true,
      .cp_world = 3,
      .cp_rank = 1,
      .cp_interleave = 2}},
    {"bf16_sinks_lse",
     {.h_q = 8,
      .s_q = 2,
      .page_size = 16,
      .max_batch = 3,
      .max_seq_len = 128,
      .has_sinks = true,
      .return_lse = true}},
    {"fp8_q_fp8",
     {.h_q = 4,
      .page_size = 32,
      .max_batch = 3,
      .max_seq_len = 128,
      .q_dtype = DType::kFP8E4M3,
      .kv_dtype = DType::kFP8E4M3}},
    {"blockwise_sparse",
     {.h_q = 4,
      .s_q = 2,
      .page_size = 64,
      .max_batch = 3,
      .max_seq_len = 128,
      .kv_dtype = DType::kFP8E4M3,
      .kv_layout = KvLayout::kFp8Blockwise,
      .topk = 16,
      .return_lse = true}},
    {"var_q_lse",
     {.h_q = 8,
      .s_q = 3,
      .page_size = 16,
      .max_batch = 3,
      .max_seq_len = 128,
      .var_q = true,
      .return_lse = true}},
    {"var_q_sparse",
     {.h_q = 4,
      .s_q = 2,
      .page_size = 16,
      .max_batch = 3,
      .max_seq_len = 128,
      .var_q = true,
      .topk = 16,
      .return_lse = true}},
    {"v4_sparse_extra",
     {.h_q = 4,
      .s_q = 2,
      .d_qk = 512,
      .page_size = 16,
      .max_batch = 3,
      .max_seq_len = 128,
      .kv_dtype = DType::kFP8E4M3,
      .kv_layout = KvLayout::kFp8V4,
      .has_sinks = true,
      .topk = 16,
      .extra_topk = 8,
      .extra_page_size = 4,
      .return_lse = true}},
};

INSTANTIATE_TEST_SUITE_P(Cpu, CApiTest, ::testing::ValuesIn(kCApiCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(CApi, BadProblemReturnsInvalidArgumentNamingIt) {
  mlakit_problem_t p;
  mlakit_problem_init(&p);
  p.h_q = 0;
  mlakit_decoder_t* decoder = nullptr;
  EXPECT_EQ(mlakit_decoder_create(&p, "cpu", &decoder), 1);
  EXPECT_EQ(decoder, nullptr);
  EXPECT_NE(std::string(mlakit_last_error()).find("heads"), std::string::npos)
      << mlakit_last_error();

  mlakit_problem_init(&p);
  EXPECT_EQ(mlakit_decoder_create(&p, "nope", &decoder), 1);
  EXPECT_NE(std::string(mlakit_last_error()).find("backend"), std::string::npos);
  EXPECT_EQ(mlakit_decoder_create(nullptr, "cpu", &decoder), 1);
  EXPECT_NE(std::string(mlakit_last_error()).find("problem"), std::string::npos);
}

TEST(CApi, BadRunArgsReturnInvalidArgumentNamingThem) {
  mlakit_problem_t p;
  mlakit_problem_init(&p);
  p.h_q = 4, p.max_seq_len = 64;
  mlakit_decoder_t* decoder = nullptr;
  ASSERT_EQ(mlakit_decoder_create(&p, "cpu", &decoder), 0) << mlakit_last_error();
  const std::unique_ptr<mlakit_decoder_t, void (*)(mlakit_decoder_t*)> owner(
      decoder, mlakit_decoder_destroy);
  mlakit_run_args_t a;
  mlakit_run_args_init(&a);
  a.batch = 1;  // q is null
  EXPECT_EQ(mlakit_decoder_run(decoder, &a, nullptr, 0, nullptr), 1);
  EXPECT_EQ(std::string(mlakit_last_error()).rfind("invalid argument: q:", 0), 0u)
      << mlakit_last_error();
  EXPECT_EQ(mlakit_decoder_run(decoder, nullptr, nullptr, 0, nullptr), 1);
  EXPECT_NE(std::string(mlakit_last_error()).find("args"), std::string::npos);
}

TEST(CApi, VarQRefusesARequestStrideNamingIt) {
  const Problem p{
      .h_q = 4, .s_q = 2, .page_size = 16, .max_batch = 2, .max_seq_len = 64, .var_q = true};
  const HostInputs in = mlakit::harness::make_inputs(p, std::vector<int32_t>{5, 20},
                                                     {.seed = case_seed(), .q_lens = {2, 1}});
  const mlakit_problem_t cp = to_c(p);
  mlakit_decoder_t* decoder = nullptr;
  ASSERT_EQ(mlakit_decoder_create(&cp, "cpu", &decoder), 0) << mlakit_last_error();
  const std::unique_ptr<mlakit_decoder_t, void (*)(mlakit_decoder_t*)> owner(
      decoder, mlakit_decoder_destroy);
  std::vector<uint8_t> out(in.out_bytes(), 0xff);
  const RunArgs a = in.args(out.data(), nullptr);
  mlakit_run_args_t ca;
  mlakit_run_args_init(&ca);
  ca.batch = a.batch, ca.q = a.q, ca.kv_cache = a.kv_cache, ca.num_pages = a.num_pages;
  ca.block_table = a.block_table, ca.block_table_stride = a.block_table_stride;
  ca.seq_lens = a.seq_lens, ca.out = a.out, ca.cu_seqlens_q = a.cu_seqlens_q;
  ASSERT_EQ(mlakit_decoder_run(decoder, &ca, nullptr, 0, nullptr), 0) << mlakit_last_error();
  ca.q_stride_b = int64_t{2} * p.h_q * mlakit::kDqk;
  EXPECT_EQ(mlakit_decoder_run(decoder, &ca, nullptr, 0, nullptr), 1);
  EXPECT_EQ(std::string(mlakit_last_error()).rfind("invalid argument: q_stride_b", 0), 0u)
      << mlakit_last_error();
  ca.q_stride_b = 0, ca.cu_seqlens_q = nullptr;
  EXPECT_EQ(mlakit_decoder_run(decoder, &ca, nullptr, 0, nullptr), 1);
  EXPECT_EQ(std::string(mlakit_last_error()).rfind("invalid argument: cu_seqlens_q", 0), 0u)
      << mlakit_last_error();
}

TEST(CApi, MergePartialsMatchesCppApi) {
  mlakit_merge_args_t c;
  mlakit_merge_args_init(&c);
  const mlakit::MergeArgs d;
  EXPECT_EQ(c.s_q, d.s_q);
  EXPECT_EQ(c.dtype, MLAKIT_BF16);
  EXPECT_EQ(c.partial_out, nullptr);
  EXPECT_EQ(c.sinks, nullptr);

  // fp32 partials of 3 ranks, one in four partial LSEs -inf (an empty shard), with sinks.
  const int world = 3, batch = 2, s_q = 2, h_q = 5;
  const size_t rows = size_t{batch} * s_q * h_q;
  std::mt19937_64 rng(case_seed());
  std::normal_distribution<float> normal;
  std::vector<float> partial_out(world * rows * mlakit::kDv), partial_lse(world * rows), sinks(h_q);
  for (float& x : partial_out) x = normal(rng);
  for (float& x : partial_lse) {
    x = rng() % 4 == 0 ? -std::numeric_limits<float>::infinity() : 3 * normal(rng);
  }
  for (float& x : sinks) x = normal(rng);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out_c(rows * mlakit::kDv, nan), lse_c(rows, nan);
  std::vector<float> out_cpp(rows * mlakit::kDv, nan), lse_cpp(rows, nan);

  c.world = world, c.batch = batch, c.s_q = s_q, c.h_q = h_q, c.dtype = MLAKIT_FP32;
  c.partial_out = partial_out.data(), c.partial_lse = partial_lse.data(), c.sinks = sinks.data();
  c.out = out_c.data(), c.lse = lse_c.data();
  ASSERT_EQ(mlakit_merge_partials(MLAKIT_DEVICE_CPU, &c, nullptr), 0) << mlakit_last_error();
  EXPECT_STREQ(mlakit_last_error(), "");
  const mlakit::MergeArgs cpp{.world = world,
                              .batch = batch,
                              .s_q = s_q,
                              .h_q = h_q,
                              .dtype = DType::kFP32,
                              .partial_out = partial_out.data(),
                              .partial_lse = partial_lse.data(),
                              .sinks = sinks.data(),
                              .out = out_cpp.data(),
                              .lse = lse_cpp.data()};
  ASSERT_TRUE(mlakit::merge_partials(mlakit::ops::Device::kCpu, cpp).ok());
  EXPECT_EQ(std::memcmp(out_c.data(), out_cpp.data(), out_c.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(lse_c.data(), lse_cpp.data(), lse_c.size() * sizeof(float)), 0);
  EXPECT_TRUE(std::none_of(out_c.begin(), out_c.end(), [](float x) { return std::isnan(x); }));
  // The same partials strides apart (NaN between them): the same result through the C struct.
  const int64_t out_stride = int64_t(rows) * mlakit::kDv + 8, lse_stride = rows + 3;
  std::vector<float> spaced_out(world * out_stride, nan), spaced_lse(world * lse_stride, nan);
  for (int k = 0; k < world; ++k) {
    std::copy_n(&partial_out[k * rows * mlakit::kDv], rows * mlakit::kDv,
                &spaced_out[k * out_stride]);
    std::copy_n(&partial_lse[k * rows], rows, &spaced_lse[k * lse_stride]);
  }
  std::vector<float> out_s(rows * mlakit::kDv, nan), lse_s(rows, nan);
  c.partial_out = spaced_out.data(), c.partial_lse = spaced_lse.data();
  c.partial_out_stride = out_stride, c.partial_lse_stride = lse_stride;
  c.out = out_s.data(), c.lse = lse_s.data();
  ASSERT_EQ(mlakit_merge_partials(MLAKIT_DEVICE_CPU, &c, nullptr), 0) << mlakit_last_error();
  EXPECT_EQ(std::memcmp(out_s.data(), out_cpp.data(), out_s.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(lse_s.data(), lse_cpp.data(), lse_s.size() * sizeof(float)), 0);
}

TEST(CApi, BadMergeArgsReturnInvalidArgumentNamingThem) {
  mlakit_merge_args_t c;
  mlakit_merge_args_init(&c);
  c.world = 2, c.batch = 1, c.h_q = 4;  // partial_out is null
  EXPECT_EQ(mlakit_merge_partials(MLAKIT_DEVICE_CPU, &c, nullptr), 1);
  EXPECT_EQ(std::string(mlakit_last_error()).rfind("invalid argument: partial_out:", 0), 0u)
      << mlakit_last_error();
  c.world = 0;
  EXPECT_EQ(mlakit_merge_partials(MLAKIT_DEVICE_CPU, &c, nullptr), 1);
  EXPECT_EQ(std::string(mlakit_last_error()).rfind("invalid argument: world:", 0), 0u)
      << mlakit_last_error();
  EXPECT_EQ(mlakit_merge_partials(7, &c, nullptr), 1);
  EXPECT_NE(std::string(mlakit_last_error()).find("device"), std::string::npos)
      << mlakit_last_error();
  EXPECT_EQ(mlakit_merge_partials(MLAKIT_DEVICE_CPU, nullptr, nullptr), 1);
  EXPECT_NE(std::string(mlakit_last_error()).find("args"), std::string::npos);
}

}  // namespace
}  // namespace mlakit_test
