// One test per validation rule of validate_args in src/core/validate.cc (checked at each run), and
// the calls it accepts. Each checks the status code and that the message, "<arg>: expected
// <expected>, given <given>", names the argument and, where it has them, the expected and given
// values, and that Decoder::run refuses the same. The written buffers: validation_buffers_test.cc.
#include "validation_args.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "cpu_run.h"
#include "mlakit/mlakit.h"
#include "status_match.h"

namespace mlakit_test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------------------------
// validate_args and Decoder::run
// ---------------------------------------------------------------------------------------------

// Pointers for the mutations: valid targets (and kScale), and addresses one byte off alignment.
alignas(256) const int32_t kInts[4] = {0, 0, 0, 0};
float g_floats[4];  // a writable target; never written, as the call is refused
const void* misaligned(const void* ptr, int bytes) { return static_cast<const char*>(ptr) + bytes; }

struct ArgsRule {
  const char* name;
  Base base;
  void (*mutate)(RunArgs&);
  const char* arg;
  std::vector<std::string> parts;  // expected and given, where the message has them
};

const ArgsRule kArgsRules[] = {
    {"batch_0",
     Base::kDense,
     [](RunArgs& a) { a.batch = 0; },
     "batch",
     {"expected 1..2", "given 0"}},
    {"batch_over_max",
     Base::kDense,
     [](RunArgs& a) { a.batch = 3; },
     "batch",
     {"expected 1..2", "given 3"}},
    {"q_null",
     Base::kDense,
     [](RunArgs& a) { a.q = nullptr; },
     "q:",
     {"a non-null pointer", "given nullptr"}},
    {"q_misaligned",
     Base::kDense,
     [](RunArgs& a) { a.q = misaligned(a.q, 2); },
     "q:",
     {"aligned to 16 bytes", "given 0x"}},
    {"kv_cache_null",
     Base::kDense,
     [](RunArgs& a) { a.kv_cache = nullptr; },
     "kv_cache",
     {"a non-null pointer", "given nullptr"}},
    {"kv_cache_misaligned",
     Base::kDense,
     [](RunArgs& a) { a.kv_cache = misaligned(a.kv_cache, 8); },
     "kv_cache",
     {"aligned to 16 bytes"}},
    {"out_null",
     Base::kDense,
     [](RunArgs& a) { a.out = nullptr; },
     "out:",
     {"a non-null pointer", "given nullptr"}},
    {"out_misaligned",
     Base::kDense,
     [](RunArgs& a) { a.out = const_cast<void*>(misaligned(a.out, 2)); },
     "out:",
     {"aligned to 16 bytes"}},
    {"num_pages_0",
     Base::kDense,
     [](RunArgs& a) { a.num_pages = 0; },
     "num_pages",
     {"expected 1..", "given 0"}},
    {"block_table_null",
     Base::kDense,
     [](RunArgs& a) { a.block_table = nullptr; },
     "block_table",
     {"a non-null pointer", "given nullptr"}},
    {"block_table_misaligned",
     Base::kDense,
     [](RunArgs& a) { a.block_table = static_cast<const int32_t*>(misaligned(a.block_table, 2)); },
     "block_table",
     {"aligned to 4 bytes"}},
    {"seq_lens_null",
     Base::kDense,
     [](RunArgs& a) { a.seq_lens = nullptr; },
     "seq_lens",
     {"a non-null pointer", "given nullptr"}},
    {"seq_lens_misaligned",
     Base::kDense,
     [](RunArgs& a) { a.seq_lens = static_cast<const int32_t*>(misaligned(a.seq_lens, 1)); },
     "seq_lens",
     {"aligned to 4 bytes"}},
    {"block_table_stride_0",
     Base::kDense,
     [](RunArgs& a) { a.block_table_stride = 0; },
     "block_table_stride",
     {"expected 1..", "given 0"}},
    {"indices_for_dense",
     Base::kDense,
     [](RunArgs& a) { a.indices = kInts; },
     "indices",
     {"nullptr because the problem is dense", "given a pointer"}},
    {"topk_lens_for_dense",
     Base::kDense,
     [](RunArgs& a) { a.topk_lens = kInts; },
     "topk_lens",
     {"nullptr because the problem is dense", "given a pointer"}},
    {"sparse_without_indices",
     Base::kSparse,
     [](RunArgs& a) { a.indices = nullptr; },
     "indices",
     {"[b, s_q, 8] int32", "given nullptr"}},
    {"sparse_indices_misaligned",
     Base::kSparse,
     [](RunArgs& a) { a.indices = static_cast<const int32_t*>(misaligned(a.indices, 2)); },
     "indices",
     {"aligned to 4 bytes"}},
    {"sparse_topk_lens_misaligned",
     Base::kSparse,
     [](RunArgs& a) { a.topk_lens = static_cast<const int32_t*>(misaligned(a.topk_lens, 2)); },
     "topk_lens",
     {"aligned to 4 bytes"}},
    {"sinks_missing",
     Base::kSinksLse,
     [](RunArgs& a) { a.sinks = nullptr; },
     "sinks",
     {"a non-null pointer", "given nullptr"}},
    {"sinks_misaligned",
     Base::kSinksLse,
     [](RunArgs& a) { a.sinks = static_cast<const float*>(misaligned(a.sinks, 2)); },
     "sinks",
     {"aligned to 4 bytes"}},
    {"sinks_without_has_sinks",
     Base::kDense,
     [](RunArgs& a) { a.sinks = &kScale; },
     "sinks",
     {"Problem::has_sinks is false", "given a pointer"}},
    {"lse_missing",
     Base::kSinksLse,
     [](RunArgs& a) { a.lse = nullptr; },
     "lse",
     {"a non-null pointer", "given nullptr"}},
    {"lse_without_return_lse",
     Base::kDense,
     [](RunArgs& a) { a.lse = g_floats; },
     "lse",
     {"Problem::return_lse is false", "given a pointer"}},
    {"softmax_scale_0",
     Base::kDense,
     [](RunArgs& a) { a.softmax_scale = 0; },
     "softmax_scale",
     {"a finite value > 0", "given 0"}},
    {"softmax_scale_negative",
     Base::kDense,
     [](RunArgs& a) { a.softmax_scale = -0.5f; },
     "softmax_scale",
     {"a finite value > 0", "given -0.5"}},
    {"softmax_scale_nan",
     Base::kDense,
     [](RunArgs& a) { a.softmax_scale = kNaN; },
     "softmax_scale",
     {"a finite value > 0", "given nan"}},
    {"softmax_scale_inf",
     Base::kDense,
     [](RunArgs& a) { a.softmax_scale = kInf; },
     "softmax_scale",
     {"a finite value > 0", "given inf"}},
    {"fp8_q_without_q_scale",
     Base::kFp8Q,
     [](RunArgs& a) { a.q_scale = kNaN; },
     "q_scale",
     {"a scale (host value or pointer) for an fp8 q", "given none"}},
    {"q_scale_host_and_pointer",
     Base::kFp8Q,
     [](RunArgs& a) { a.q_scale_ptr = &kScale; },
     "q_scale",
     {"either a host value or a pointer, not both", "given both"}},
    {"q_scale_ptr_misaligned",
     Base::kFp8Q,
     [](RunArgs& a) {
       a.q_scale = kNaN;
       a.q_scale_ptr = static_cast<const float*>(misaligned(&kScale, 1));
     },
     "q_scale_ptr",
     {"aligned to 4 bytes"}},
    {"q_scale_0",
     Base::kFp8Q,
     [](RunArgs& a) { a.q_scale = 0; },
     "q_scale",
     {"a finite value > 0", "given 0"}},
    {"q_scale_inf",
     Base::kFp8Q,
     [](RunArgs& a) { a.q_scale = kInf; },
     "q_scale",
     {"a finite value > 0", "given inf"}},
    {"q_scale_for_bf16_q",
     Base::kDense,
     [](RunArgs& a) { a.q_scale = 1; },
     "q_scale",
     {"none for a bf16 q", "given a scale"}},
    {"q_scale_ptr_for_bf16_q",
     Base::kFp8,
     [](RunArgs& a) { a.q_scale_ptr = &kScale; },
     "q_scale",
     {"none for a bf16 q", "given a scale"}},
    {"fp8_kv_without_k_scale",
     Base::kFp8,
     [](RunArgs& a) { a.k_scale = kNaN; },
     "k_scale",
     {"a scale (host value or pointer) for an fp8 cache", "given none"}},
    {"k_scale_host_and_pointer",
     Base::kFp8,
     [](RunArgs& a) { a.k_scale_ptr = &kScale; },
     "k_scale",
     {"either a host value or a pointer, not both", "given both"}},
    {"k_scale_negative",
     Base::kFp8,
     [](RunArgs& a) { a.k_scale = -1; },
     "k_scale",
     {"a finite value > 0", "given -1"}},
    {"k_scale_for_bf16_kv",
     Base::kDense,
     [](RunArgs& a) { a.k_scale = 1; },
     "k_scale",
     {"none for a bf16 cache", "given a scale"}},
    {"k_scale_ptr_for_bf16_kv",
     Base::kDense,
     [](RunArgs& a) { a.k_scale_ptr = &kScale; },
     "k_scale",
     {"none for a bf16 cache", "given a scale"}},
    {"blockwise_k_scale_0",
     Base::kBlockwise,
     [](RunArgs& a) { a.k_scale = 0; },
     "k_scale",
     {"a finite value > 0", "given 0"}},
    {"v4_k_scale_inf",
     Base::kV4Extra,
     [](RunArgs& a) { a.k_scale = kInf; },
     "k_scale",
     {"a finite value > 0", "given inf"}},
    {"extra_kv_cache_missing",
     Base::kV4Extra,
     [](RunArgs& a) { a.extra_kv_cache = nullptr; },
     "extra_kv_cache",
     {"a non-null pointer", "given nullptr"}},
    {"extra_kv_cache_misaligned",
     Base::kV4Extra,
     [](RunArgs& a) { a.extra_kv_cache = misaligned(a.extra_kv_cache, 8); },
     "extra_kv_cache",
     {"aligned to 16 bytes"}},
    {"extra_num_pages_0",
     Base::kV4Extra,
     [](RunArgs& a) { a.extra_num_pages = 0; },
     "extra_num_pages",
     {"expected 1..", "given 0"}},
    {"extra_indices_missing",
     Base::kV4Extra,
     [](RunArgs& a) { a.extra_indices = nullptr; },
     "extra_indices",
     {"[b, s_q, 4] int32 for extra_topk", "given nullptr"}},
    {"extra_indices_misaligned",
     Base::kV4Extra,
     [](RunArgs& a) {
       a.extra_indices = static_cast<const int32_t*>(misaligned(a.extra_indices, 2));
     },
     "extra_indices",
     {"aligned to 4 bytes"}},
    {"extra_topk_lens_misaligned",
     Base::kV4Extra,
     [](RunArgs& a) {
       a.extra_topk_lens = static_cast<const int32_t*>(misaligned(a.extra_topk_lens, 1));
     },
     "extra_topk_lens",
     {"aligned to 4 bytes"}},
    {"extra_kv_cache_without_extra",
     Base::kSparse,
     [](RunArgs& a) { a.extra_kv_cache = kInts; },
     "extra_kv_cache",
     {"nullptr because the problem has no extra cache (extra_topk 0)", "given a pointer"}},
    {"extra_indices_without_extra",
     Base::kSparse,
     [](RunArgs& a) { a.extra_indices = kInts; },
     "extra_indices",
     {"nullptr because the problem has no extra cache", "given a pointer"}},
    {"extra_topk_lens_without_extra",
     Base::kDense,
     [](RunArgs& a) { a.extra_topk_lens = kInts; },
     "extra_topk_lens",
     {"nullptr because the problem has no extra cache", "given a pointer"}},
    {"extra_num_pages_without_extra",
     Base::kSparse,
     [](RunArgs& a) { a.extra_num_pages = 3; },
     "extra_num_pages",
     {"0 because the problem has no extra cache", "given 3"}},
    // A V4 page (data rows, then scale rows, then padding) has no [page, token] view.
    {"v4_kv_stride_token",
     Base::kV4Extra,
     [](RunArgs& a) { a.kv_stride_token = 640; },
     "kv_stride_page, kv_stride_token",
     {"expected 0, 0 (contiguous) with kv_layout fp8_v4", "given 0, 640"}},
    {"v4_kv_stride_page",
     Base::kV4Extra,
     [](RunArgs& a) { a.kv_stride_page = 9792; },
     "kv_stride_page, kv_stride_token",
     {"with kv_layout fp8_v4", "scale rows", "given 9792, 0"}},
    {"blockwise_k_scale_host_and_pointer",
     Base::kBlockwise,
     [](RunArgs& a) {
       a.k_scale = 1;
       a.k_scale_ptr = &kScale;
     },
     "k_scale",
     {"either a host value or a pointer, not both"}},
};

void PrintTo(const ArgsRule& rule, std::ostream* os) { *os << rule.name; }

class ArgsRuleTest : public ::testing::TestWithParam<ArgsRule> {};

TEST_P(ArgsRuleTest, RefusedNamingTheArgument) {
  const ArgsRule& rule = GetParam();
  ValidCall call(rule.base);
  const Problem& p = call.in.problem;
  ASSERT_TRUE(mlakit::validate_args(p, call.args, 0, nullptr, 0).ok()) << "the base call is valid";
  rule.mutate(call.args);
  const Status st = mlakit::validate_args(p, call.args, 0, nullptr, 0);
  EXPECT_TRUE(is_error(st, StatusCode::kInvalidArgument, rule.arg));
  for (const std::string& part : rule.parts) {
    EXPECT_NE(st.message().find(part), std::string::npos)
        << "message \"" << st.message() << "\" should contain \"" << part << "\"";
  }
  // Decoder::run checks the same before anything is read.
  if (st.ok()) return;  // already failed above; running could read what the rule let through
  std::unique_ptr<Decoder> decoder;
  ASSERT_TRUE(Decoder::create(p, {.backend = "cpu"}, &decoder).ok());
  const Status run = decoder->run(call.args, nullptr, 0, nullptr);
  EXPECT_EQ(run.code(), st.code());
  EXPECT_EQ(run.message(), st.message());
}

INSTANTIATE_TEST_SUITE_P(Validate, ArgsRuleTest, ::testing::ValuesIn(kArgsRules),
                         [](const auto& info) { return std::string(info.param.name); });

// Optional arguments, scales by pointer, and each base call go through.
TEST(ValidateArgs, AcceptsValidCalls) {
  for (const Base base : {Base::kDense, Base::kSinksLse, Base::kSparse, Base::kFp8, Base::kFp8Q,
                          Base::kBlockwise, Base::kV4Extra}) {
    ValidCall call(base);
    const Problem& p = call.in.problem;
    std::unique_ptr<Decoder> decoder;
    ASSERT_TRUE(Decoder::create(p, {.backend = "cpu"}, &decoder).ok());
    EXPECT_TRUE(decoder->run(call.args, nullptr, 0, nullptr).ok()) << mlakit::describe(p);
    if (p.q_dtype == DType::kFP8E4M3) call.args.q_scale = kNaN, call.args.q_scale_ptr = &kScale;
    if (p.kv_dtype == DType::kFP8E4M3) call.args.k_scale = kNaN, call.args.k_scale_ptr = &kScale;
    EXPECT_TRUE(decoder->run(call.args, nullptr, 0, nullptr).ok()) << "scales by pointer";
  }
  ValidCall blockwise(Base::kBlockwise);  // an optional k_scale on top of the group scales
  blockwise.args.k_scale = 0.5f;
  EXPECT_TRUE(mlakit::validate_args(blockwise.in.problem, blockwise.args, 0, nullptr, 0).ok());
  ValidCall sparse(Base::kSparse);  // topk_lens is optional
  sparse.args.topk_lens = nullptr;
  EXPECT_TRUE(mlakit::validate_args(sparse.in.problem, sparse.args, 0, nullptr, 0).ok());
  ValidCall v4(Base::kV4Extra);  // so are both lengths of V4, and its k_scale
  v4.args.topk_lens = v4.args.extra_topk_lens = nullptr;
  v4.args.k_scale = 0.25f;
  EXPECT_TRUE(mlakit::validate_args(v4.in.problem, v4.args, 0, nullptr, 0).ok());
}

}  // namespace
}  // namespace mlakit_test
