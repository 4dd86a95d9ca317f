// Tests of the cpu backend, the oracle every GPU backend is checked against: its output against the
// independent float64 reference of naive_reference.h over every dtype, layout and feature, and
// its runs being bitwise repeatable. Hand-built edge cases are in cpu_backend_edges_test.cc, the
// checks of the data in host memory in cpu_data_checks_test.cc, the conversions in numeric_test.cc,
// the C API in c_api_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "cpu_run.h"
#include "harness/workload.h"
#include "mlakit/mlakit.h"
#include "naive_reference.h"
#include "reference_match.h"

namespace mlakit_test {
namespace {

// ---------------------------------------------------------------------------------------------
// The backend against the reference: dtypes x page sizes, and dtypes x features
// ---------------------------------------------------------------------------------------------

struct Dtypes {
  const char* name;
  DType q, kv, out;
  KvLayout layout;
};

const Dtypes kDtypes[] = {
    {"bf16", DType::kBF16, DType::kBF16, DType::kBF16, KvLayout::kDense},
    {"fp16", DType::kFP16, DType::kFP16, DType::kFP16, KvLayout::kDense},
    {"fp8_q_bf16", DType::kBF16, DType::kFP8E4M3, DType::kBF16, KvLayout::kDense},
    {"fp8_q_fp8", DType::kFP8E4M3, DType::kFP8E4M3, DType::kBF16, KvLayout::kDense},
    {"fp8_q_fp16_out_fp16", DType::kFP16, DType::kFP8E4M3, DType::kFP16, KvLayout::kDense},
    {"blockwise_q_bf16", DType::kBF16, DType::kFP8E4M3, DType::kBF16, KvLayout::kFp8Blockwise},
    {"blockwise_q_fp16_out_fp16", DType::kFP16, DType::kFP8E4M3, DType::kFP16,
     KvLayout::kFp8Blockwise},
    {"v4_q_bf16", DType::kBF16, DType::kFP8E4M3, DType::kBF16, KvLayout::kFp8V4},
    {"v4_q_fp16_out_fp16", DType::kFP16, DType::kFP8E4M3, DType::kFP16, KvLayout::kFp8V4},
};

struct Shape {
  const char* name;
  int h_q = 16;
  int s_q = 1;
  bool causal = true;
  int page_size = 64;
  std::vector<int32_t> lens;  // cached lengths, one per request
  int variable_batch = 0;     // > 0: lens = make_seq_lens(variable_batch, variable_len, true)
  int variable_len = 0;
  bool sinks = false;
  int topk = 0;
  bool topk_lens = false;  // per-request lengths of the indices (and of the extra indices)
  int extra_topk = 0;      // an extra cache (sparse only)
  int extra_page_size = 0;
  bool lse = true;
  float magnitude = 1.0f;  // standard deviation of q and kv
  float softmax_scale = mlakit::kDefaultSoftmaxScale;
  float blockwise_k_scale = NAN;  // an optional extra k_scale for the blockwise and V4 layouts
  bool scales_by_pointer = false;
};

// Makes random inputs for `shape` in dtypes `dt`, runs the cpu backend and compares.
void check_case(const Dtypes& dt, const Shape& shape) {
  const Problem p{.h_q = shape.h_q,
                  .s_q = shape.s_q,
                  .d_qk = mlakit::layout_d_qk(dt.layout),
                  .page_size = shape.page_size,
                  .max_batch = 64,
                  .max_seq_len = 4096,
                  .q_dtype = dt.q,
                  .kv_dtype = dt.kv,
                  .out_dtype = dt.out,
                  .kv_layout = dt.layout,
                  .causal = shape.causal,
                  .has_sinks = shape.sinks,
                  .topk = shape.topk,
                  .extra_topk = shape.extra_topk,
                  .extra_page_size = shape.extra_page_size,
                  .return_lse = shape.lse};
  const uint64_t seed = case_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << ", " << mlakit::describe(p));
  const std::vector<int32_t> lens =
      shape.variable_batch > 0
          ? mlakit::harness::make_seq_lens(shape.variable_batch, shape.variable_len, true, seed)
          : shape.lens;
  HostInputs in = mlakit::harness::make_inputs(
      p, lens, {.seed = seed, .magnitude = shape.magnitude, .topk_lens = shape.topk_lens});
  in.softmax_scale = shape.softmax_scale;
  if (dt.layout != KvLayout::kDense) in.k_scale = shape.blockwise_k_scale;

  const NaiveResult ref = naive_attention(in);
  const CpuRun run = run_cpu(in, [&](RunArgs& a) {
    if (!shape.scales_by_pointer) return;
    if (!std::isnan(a.q_scale)) {
      a.q_scale_ptr = &in.q_scale;
      a.q_scale = NAN;
    }
    if (!std::isnan(a.k_scale)) {
      a.k_scale_ptr = &in.k_scale;
      a.k_scale = NAN;
    }
  });
  ASSERT_TRUE(run.status.ok()) << run.status.to_string();
  EXPECT_TRUE(matches_reference(in, run, ref));
}

void PrintTo(const Dtypes& dt, std::ostream* os) { *os << dt.name; }
void PrintTo(const Shape& shape, std::ostream* os) { *os << shape.name; }

class DtypePageSizeTest : public ::testing::TestWithParam<std::tuple<Dtypes, int /*page_size*/>> {};

TEST_P(DtypePageSizeTest, MatchesReference) {
  const auto& [dt, page_size] = GetParam();
  check_case(dt,
             {.name = "", .h_q = 8, .page_size = page_size, .lens = {0, 1, 63, 64, 65, 129, 300}});
}

INSTANTIATE_TEST_SUITE_P(Cpu, DtypePageSizeTest,
                         ::testing::Combine(::testing::ValuesIn(kDtypes),
                                            ::testing::Values(1, 16, 48, 64, 128)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_page" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Every feature in every dtype. Lengths 0, 1, 63, 64, 65, around s_q, and not multiples of the
// page size; one long request among short ones; the largest head count.
const std::vector<int32_t> kShortLens = {0, 1, 2, 3, 17, 64, 65};
const Shape kShapes[] = {
    {.name = "mixed_lengths", .lens = {0, 1, 63, 64, 65, 129, 300}},
    {.name = "variable_lengths", .page_size = 16, .variable_batch = 8, .variable_len = 100},
    {.name = "batch1_len1_no_lse", .h_q = 8, .lens = {1}, .lse = false},
    {.name = "all_empty", .h_q = 8, .lens = {0, 0, 0}},
    {.name = "sq2_causal", .h_q = 8, .s_q = 2, .page_size = 16, .lens = kShortLens},
    {.name = "sq3_causal", .h_q = 8, .s_q = 3, .page_size = 16, .lens = kShortLens},
    {.name = "sq4_causal", .h_q = 8, .s_q = 4, .page_size = 16, .lens = kShortLens},
    {.name = "sq2_noncausal", .h_q = 8, .s_q = 2, .causal = false, .lens = kShortLens},
    {.name = "sq16_causal", .h_q = 4, .s_q = 16, .page_size = 16, .lens = {0, 5, 16, 17, 100}},
    {.name = "sinks", .lens = {0, 1, 64, 150}, .sinks = true},
    {.name = "sinks_sq2_causal", .s_q = 2, .page_size = 16, .lens = kShortLens, .sinks = true},
    {.name = "sparse", .lens = {0, 1, 100, 300}, .topk = 64},
    {.name = "sparse_topk_lens_sq2",
     .s_q = 2,
     .page_size = 16,
     .lens = {0, 1, 100, 300},
     .topk = 48,
     .topk_lens = true},
    {.name = "sparse_sinks_page1",
     .s_q = 2,
     .page_size = 1,
     .lens = {0, 40, 70},
     .sinks = true,
     .topk = 32},
    // The extra cache (DeepSeek V4's window), attended in the same softmax as the main one: its
    // own page size, -1 slots, per-request lengths (0 included), sinks, s_q up to 4.
    {.name = "sparse_extra",
     .lens = {0, 1, 100, 300},
     .topk = 64,
     .extra_topk = 32,
     .extra_page_size = 16},
    {.name = "sparse_extra_lens_sinks_sq4",
     .s_q = 4,
     .page_size = 16,
     .lens = {0, 1, 100, 300, 7},
     .sinks = true,
     .topk = 48,
     .topk_lens = true,
     .extra_topk = 20,
     .extra_page_size = 3},
    {.name = "sparse_extra_page1_sq3",
     .h_q = 8,
     .s_q = 3,
     .page_size = 1,
     .lens = {0, 40, 70},
     .topk = 32,
     .extra_topk = 7,
     .extra_page_size = 64},
    {.name = "heads128", .h_q = 128, .lens = {1, 65, 130}},
    {.name = "long", .lens = {3, 2000, 0, 64}},
    {.name = "peaky_softmax", .lens = {1, 65, 200}, .magnitude = 3.0f},
    {.name = "custom_scales",
     .lens = {1, 65, 200},
     .softmax_scale = 0.1f,
     .blockwise_k_scale = 0.75f},
    {.name = "scales_by_pointer",
     .s_q = 2,
     .lens = {1, 65, 200},
     .sinks = true,
     .blockwise_k_scale = 0.75f,
     .scales_by_pointer = true},
};

class FeatureTest : public ::testing::TestWithParam<std::tuple<Shape, Dtypes>> {};

TEST_P(FeatureTest, MatchesReference) {
  const auto& [shape, dt] = GetParam();
  check_case(dt, shape);
}

INSTANTIATE_TEST_SUITE_P(Cpu, FeatureTest,
                         ::testing::Combine(::testing::ValuesIn(kShapes),
                                            ::testing::ValuesIn(kDtypes)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  std::get<1>(info.param).name;
                         });

// The cpu backend is the oracle: the same inputs must give the same bits every time, whatever the
// thread schedule.
TEST(CpuBackend, RepeatedRunsAreBitwiseEqual) {
  const Problem p{.h_q = 32,
                  .s_q = 2,
                  .page_size = 16,
                  .max_batch = 4,
                  .max_seq_len = 512,
                  .has_sinks = true,
                  .return_lse = true};
  const HostInputs in =
      mlakit::harness::make_inputs(p, std::vector<int32_t>{5, 300, 0, 77}, {.seed = case_seed()});
  const CpuRun a = run_cpu(in), b = run_cpu(in);
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace mlakit_test
