// One test per validation rule of src/core/validate.cc (validate(Problem) at Decoder creation,
// validate_args at each run), plus the checks of Decoder::create and can_run. Each checks the
// status code and that the message, "<arg>: expected <expected>, given <given>", names the argument
// and, where it has them, the expected and given values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "cpu_run.h"
#include "harness/workload.h"
#include "mlakit/mlakit.h"
#include "status_match.h"

namespace mlakit_test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------------------------
// validate(Problem)
// ---------------------------------------------------------------------------------------------

Problem valid_problem() {
  return {.h_q = 16, .s_q = 1, .page_size = 64, .max_batch = 4, .max_seq_len = 1024};
}

struct ProblemRule {
  const char* name;
  void (*mutate)(Problem&);
  const char* arg;
  const char* expected;
  const char* given;
};

const ProblemRule kProblemRules[] = {
    {"heads_0", [](Problem& p) { p.h_q = 0; }, "heads", "expected 1..128", "given 0"},
    {"heads_129", [](Problem& p) { p.h_q = 129; }, "heads", "expected 1..128", "given 129"},
    {"heads_negative", [](Problem& p) { p.h_q = -1; }, "heads", "expected 1..128", "given -1"},
    {"s_q_0", [](Problem& p) { p.s_q = 0; }, "s_q", "expected 1..16", "given 0"},
    {"s_q_17", [](Problem& p) { p.s_q = 17; }, "s_q", "expected 1..16", "given 17"},
    {"d_qk_512", [](Problem& p) { p.d_qk = 512; }, "d_qk", "576", "given 512"},
    {"d_qk_192", [](Problem& p) { p.d_qk = 192; }, "d_qk", "576", "given 192"},
    {"d_v_576", [](Problem& p) { p.d_v = 576; }, "d_v", "512", "given 576"},
    {"d_v_128", [](Problem& p) { p.d_v = 128; }, "d_v", "512", "given 128"},
    {"page_size_0", [](Problem& p) { p.page_size = 0; }, "page_size", "expected 1..", "given 0"},
    {"page_size_negative", [](Problem& p) { p.page_size = -64; }, "page_size", "expected 1..",
     "given -64"},
    {"page_size_huge", [](Problem& p) { p.page_size = 1025; }, "page_size", "expected 1..1024",
     "given 1025"},
    {"max_batch_0", [](Problem& p) { p.max_batch = 0; }, "max_batch", "expected 1..", "given 0"},
    {"max_seq_len_negative", [](Problem& p) { p.max_seq_len = -1; }, "max_seq_len", "expected 0..",
     "given -1"},
    {"topk_negative", [](Problem& p) { p.topk = -1; }, "topk", "expected 0..", "given -1"},
    {"topk_huge", [](Problem& p) { p.topk = (1 << 16) + 1; }, "topk", "expected 0..65536",
     "given 65537"},
    {"out_fp8",
     [](Problem& p) {
       p.kv_dtype = DType::kFP8E4M3;
       p.out_dtype = DType::kFP8E4M3;
     },
     "out_dtype", "bf16 or fp16", "given fp8_e4m3"},
    {"out_fp32", [](Problem& p) { p.out_dtype = DType::kFP32; }, "out_dtype", "bf16 or fp16",
     "given fp32"},
    {"bf16_kv_fp16_q", [](Problem& p) { p.q_dtype = DType::kFP16; }, "q_dtype", "bf16",
     "given fp16"},
    {"fp16_kv_bf16_q",
     [](Problem& p) {
       p.kv_dtype = DType::kFP16;
       p.out_dtype = DType::kFP16;
     },
     "q_dtype", "fp16", "given bf16"},
    {"bf16_kv_fp8_q", [](Problem& p) { p.q_dtype = DType::kFP8E4M3; }, "q_dtype", "bf16",
     "given fp8_e4m3"},
    {"bf16_kv_fp16_out", [](Problem& p) { p.out_dtype = DType::kFP16; }, "out_dtype", "bf16",
     "given fp16"},
    {"blockwise_bf16_kv", [](Problem& p) { p.kv_layout = KvLayout::kFp8Blockwise; }, "kv_dtype",
     "fp8_e4m3", "given bf16"},
    {"blockwise_fp8_q",
     [](Problem& p) {
       p.kv_layout = KvLayout::kFp8Blockwise;
       p.kv_dtype = DType::kFP8E4M3;
       p.q_dtype = DType::kFP8E4M3;
     },
     "q_dtype", "bf16 or fp16 with fp8_blockwise", "given fp8_e4m3"},
    {"fp8_kv_fp32_q",
     [](Problem& p) {
       p.kv_dtype = DType::kFP8E4M3;
       p.q_dtype = DType::kFP32;
     },
     "q_dtype", "fp8", "given fp32"},
    {"fp32_kv",
     [](Problem& p) {
       p.kv_dtype = DType::kFP32;
       p.q_dtype = DType::kFP32;
     },
     "kv_dtype", "bf16, fp16 or fp8_e4m3", "given fp32"},
    {"unknown_layout", [](Problem& p) { p.kv_layout = static_cast<KvLayout>(7); }, "kv_layout",
     "dense, fp8_blockwise or fp8_v4", "given 7"},
    // V4: the layout decides d_qk (512), and the cache is fp8 with a 16-bit q.
    {"v4_d_qk_576",
     [](Problem& p) {
       p.kv_layout = KvLayout::kFp8V4;
       p.kv_dtype = DType::kFP8E4M3;
     },
     "d_qk", "expected 512 (kv_layout fp8_v4)", "given 576"},
    {"dense_d_qk_512", [](Problem& p) { p.d_qk = 512; }, "d_qk", "expected 576 (kv_layout dense)",
     "given 512"},
    {"v4_bf16_kv",
     [](Problem& p) {
       p.kv_layout = KvLayout::kFp8V4;
       p.d_qk = 512;
     },
     "kv_dtype", "fp8_e4m3 with kv_layout fp8_v4", "given bf16"},
    {"v4_fp8_q",
     [](Problem& p) {
       p.kv_layout = KvLayout::kFp8V4;
       p.d_qk = 512;
       p.kv_dtype = p.q_dtype = DType::kFP8E4M3;
     },
     "q_dtype", "bf16 or fp16 with fp8_v4", "given fp8_e4m3"},
    {"v4_d_v_448",
     [](Problem& p) {
       p.kv_layout = KvLayout::kFp8V4;
       p.kv_dtype = DType::kFP8E4M3;
       p.d_qk = 512;
       p.d_v = 448;
     },
     "d_v", "512", "given 448"},
    // The extra cache: sparse only, its own page size only with it.
    {"extra_topk_dense", [](Problem& p) { p.extra_topk = 8; }, "extra_topk",
     "0 for a dense problem (an extra cache needs topk > 0)", "given 8"},
    {"extra_topk_negative",
     [](Problem& p) {
       p.topk = 8;
       p.extra_topk = -1;
     },
     "extra_topk", "expected 0..65536", "given -1"},
    {"extra_topk_huge",
     [](Problem& p) {
       p.topk = 8;
       p.extra_topk = (1 << 16) + 1;
     },
     "extra_topk", "expected 0..65536", "given 65537"},
    {"extra_page_size_without_extra",
     [](Problem& p) {
       p.topk = 8;
       p.extra_page_size = 16;
     },
     "extra_page_size", "0 without an extra cache (extra_topk 0)", "given 16"},
    {"extra_page_size_huge",
     [](Problem& p) {
       p.topk = 8;
       p.extra_topk = 4;
       p.extra_page_size = 1025;
     },
     "extra_page_size", "expected 0..1024", "given 1025"},
    {"extra_page_size_negative",
     [](Problem& p) {
       p.topk = 8;
       p.extra_topk = 4;
       p.extra_page_size = -2;
     },
     "extra_page_size", "expected 0..1024", "given -2"},
};

void PrintTo(const ProblemRule& rule, std::ostream* os) { *os << rule.name; }

class ProblemRuleTest : public ::testing::TestWithParam<ProblemRule> {};

TEST_P(ProblemRuleTest, RefusedNamingTheArgument) {
  const ProblemRule& rule = GetParam();
  Problem p = valid_problem();
  rule.mutate(p);
  EXPECT_TRUE(is_error(mlakit::validate(p), StatusCode::kInvalidArgument, rule.arg,
                       {rule.expected, rule.given}));
  // Decoder creation and can_run validate first, with the same status.
  std::unique_ptr<Decoder> decoder;
  EXPECT_TRUE(is_error(Decoder::create(p, {.backend = "cpu"}, &decoder),
                       StatusCode::kInvalidArgument, rule.arg, {rule.expected, rule.given}));
  EXPECT_EQ(decoder, nullptr);
  EXPECT_TRUE(is_error(mlakit::can_run("cpu", p), StatusCode::kInvalidArgument, rule.arg,
                       {rule.expected, rule.given}));
}

INSTANTIATE_TEST_SUITE_P(Validate, ProblemRuleTest, ::testing::ValuesIn(kProblemRules),
                         [](const auto& info) { return std::string(info.param.name); });

// Every supported combination is accepted (and the cpu backend takes it).
TEST(ValidateProblem, AcceptsEverySupportedCombination) {
  struct Combo {
    DType q, kv, out;
    KvLayout layout;
  };
  const Combo combos[] = {
      {DType::kBF16, DType::kBF16, DType::kBF16, KvLayout::kDense},
      {DType::kFP16, DType::kFP16, DType::kFP16, KvLayout::kDense},
      {DType::kBF16, DType::kFP8E4M3, DType::kBF16, KvLayout::kDense},
      {DType::kFP16, DType::kFP8E4M3, DType::kFP16, KvLayout::kDense},
      {DType::kFP8E4M3, DType::kFP8E4M3, DType::kBF16, KvLayout::kDense},
      {DType::kFP8E4M3, DType::kFP8E4M3, DType::kFP16, KvLayout::kDense},
      {DType::kBF16, DType::kFP8E4M3, DType::kBF16, KvLayout::kFp8Blockwise},
      {DType::kFP16, DType::kFP8E4M3, DType::kFP16, KvLayout::kFp8Blockwise},
      {DType::kBF16, DType::kFP8E4M3, DType::kFP16, KvLayout::kFp8Blockwise},
      {DType::kBF16, DType::kFP8E4M3, DType::kBF16, KvLayout::kFp8V4},
      {DType::kFP16, DType::kFP8E4M3, DType::kFP16, KvLayout::kFp8V4},
  };
  for (const Combo& c : combos) {
    Problem p = valid_problem();
    p.q_dtype = c.q, p.kv_dtype = c.kv, p.out_dtype = c.out, p.kv_layout = c.layout;
    p.d_qk = mlakit::layout_d_qk(c.layout);
    const Status st = mlakit::validate(p);
    EXPECT_TRUE(st.ok()) << mlakit::describe(p) << ": " << st.to_string();
    EXPECT_TRUE(mlakit::can_run("cpu", p).ok()) << mlakit::describe(p);
  }
  // The edges of every range.
  for (const auto edit :
       {+[](Problem& p) { p.h_q = 1; }, +[](Problem& p) { p.h_q = 128; },
        +[](Problem& p) { p.s_q = 16; }, +[](Problem& p) { p.page_size = 1; },
        +[](Problem& p) { p.page_size = 1024; }, +[](Problem& p) { p.max_seq_len = 0; },
        +[](Problem& p) { p.topk = 1 << 16; }, +[](Problem& p) { p.topk = p.extra_topk = 1 << 16; },
        +[](Problem& p) { p.topk = 1, p.extra_topk = 1, p.extra_page_size = 1024; },
        +[](Problem& p) { p.topk = 1, p.extra_topk = 1, p.extra_page_size = 1; }}) {
    Problem p = valid_problem();
    edit(p);
    EXPECT_TRUE(mlakit::validate(p).ok()) << mlakit::describe(p);
  }
}

// ---------------------------------------------------------------------------------------------
// validate_args and Decoder::run
// ---------------------------------------------------------------------------------------------

enum class Base { kDense, kSinksLse, kSparse, kFp8, kFp8Q, kBlockwise, kV4Extra };

Problem base_problem(Base base) {
  Problem p{.h_q = 4, .page_size = 16, .max_batch = 2, .max_seq_len = 64};
  switch (base) {
    case Base::kDense: break;
    case Base::kSinksLse: p.has_sinks = p.return_lse = true; break;
    case Base::kSparse: p.topk = 8; break;
    case Base::kFp8: p.kv_dtype = DType::kFP8E4M3; break;
    case Base::kFp8Q: p.kv_dtype = p.q_dtype = DType::kFP8E4M3; break;
    case Base::kBlockwise:
      p.kv_dtype = DType::kFP8E4M3;
      p.kv_layout = KvLayout::kFp8Blockwise;
      break;
    case Base::kV4Extra:
      p.kv_dtype = DType::kFP8E4M3;
      p.kv_layout = KvLayout::kFp8V4;
      p.d_qk = 512;
      p.topk = 8;
      p.extra_topk = 4;
      p.extra_page_size = 2;
      break;
  }
  return p;
}

// A valid call: real inputs (so that a rule that wrongly let a call through could still run).
struct ValidCall {
  explicit ValidCall(Base base)
      : in(mlakit::harness::make_inputs(base_problem(base), std::vector<int32_t>{5, 40},
                                        {.seed = 17, .topk_lens = true})),
        out(in.out_bytes()),
        lse(in.lse_count()),
        args(in.args(out.data(), lse.data())) {}
  mlakit::harness::HostInputs in;
  std::vector<uint8_t> out;
  std::vector<float> lse;
  RunArgs args;
};

// Pointers for the mutations: valid targets, and addresses one byte off alignment.
alignas(256) const float kScale = 0.5f;
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

// The workspace rules, with a workspace that the cpu backend never needs: called directly.
TEST(ValidateArgs, WorkspaceTooSmall) {
  ValidCall call(Base::kDense);
  alignas(256) static uint8_t workspace[2048];
  EXPECT_TRUE(is_error(mlakit::validate_args(call.in.problem, call.args, 1024, workspace, 512),
                       StatusCode::kInvalidArgument, "workspace_size",
                       {"expected at least 1024 bytes", "given 512"}));
  EXPECT_TRUE(mlakit::validate_args(call.in.problem, call.args, 1024, workspace, 1024).ok());
}

TEST(ValidateArgs, WorkspaceNullOrMisaligned) {
  ValidCall call(Base::kDense);
  alignas(256) static uint8_t workspace[2048];
  EXPECT_TRUE(is_error(mlakit::validate_args(call.in.problem, call.args, 1024, nullptr, 1024),
                       StatusCode::kInvalidArgument, "workspace", {"given nullptr"}));
  EXPECT_TRUE(
      is_error(mlakit::validate_args(call.in.problem, call.args, 1024, workspace + 64, 1024),
               StatusCode::kInvalidArgument, "workspace", {"aligned to 256 bytes"}));
  // No workspace needed: none has to be given.
  EXPECT_TRUE(mlakit::validate_args(call.in.problem, call.args, 0, nullptr, 0).ok());
}

// Room for the out of a ValidCall (b 2, h_q 4, 512 16-bit values a row) and nothing else.
void* out_over() {
  alignas(256) static uint8_t room[2 * 4 * 512 * 2];
  return room;
}

// Copies `bytes` bytes of an argument into a region of their own, with nothing of the call within
// 256 KiB of them, and returns the copy: a written buffer placed over it can overlap it alone,
// whatever the heap put next to the original.
char* isolate(const void* ptr, size_t bytes) {
  alignas(256) static char arena[1 << 20];
  char* copy = arena + (256 << 10);
  EXPECT_LE(bytes, sizeof(arena) / 2);
  std::memcpy(copy, ptr, bytes);
  return copy;
}

// A written buffer (out, lse, the workspace) that overlaps another argument is a data race and
// gave wrong results: refused, naming both, from the addresses alone (nothing is read).
TEST(ValidateArgs, WrittenBuffersOverlappingAnotherArgumentAreRefused) {
  struct Overlap {
    Base base;
    const char* written;
    const char* other;
    void (*mutate)(RunArgs&);
  };
  const Overlap cases[] = {
      {Base::kDense, "out", "q", [](RunArgs& a) { a.out = const_cast<void*>(a.q); }},
      {Base::kDense, "out", "kv_cache",
       [](RunArgs& a) { a.out = const_cast<char*>(static_cast<const char*>(a.kv_cache)) + 4096; }},
      // The small arguments out is placed over live in a buffer of out's size of their own
      // (out_over), so that out reaches nothing else, wherever the heap put the test's inputs.
      {Base::kDense, "out", "block_table",
       [](RunArgs& a) { a.block_table = static_cast<const int32_t*>(a.out = out_over()); }},
      {Base::kDense, "out", "seq_lens",
       [](RunArgs& a) { a.seq_lens = static_cast<const int32_t*>(a.out = out_over()); }},
      {Base::kSinksLse, "out", "lse", [](RunArgs& a) { a.out = a.lse; }},
      {Base::kSinksLse, "out", "sinks",
       [](RunArgs& a) { a.sinks = static_cast<const float*>(a.out = out_over()); }},
      {Base::kSparse, "out", "indices",
       [](RunArgs& a) { a.indices = static_cast<const int32_t*>(a.out = out_over()); }},
      {Base::kSparse, "out", "topk_lens",
       [](RunArgs& a) { a.topk_lens = static_cast<const int32_t*>(a.out = out_over()); }},
      // The V4 caches and lists: copied to a region of their own (isolate), out over the copy.
      {Base::kV4Extra, "out", "kv_cache",
       [](RunArgs& a) {
         // In the last page's padding: a V4 page of 16 tokens is 9344 bytes, padded to 9792.
         char* kv = isolate(a.kv_cache, a.num_pages * 9792);
         a.kv_cache = kv;
         a.out = kv + a.num_pages * 9792 - 16;
       }},
      {Base::kV4Extra, "out", "extra_kv_cache",
       [](RunArgs& a) {
         // Pages of 2 tokens: 1168 bytes, padded to 1728; out starts in the first one's padding.
         char* extra = isolate(a.extra_kv_cache, a.extra_num_pages * 1728);
         a.extra_kv_cache = extra;
         a.out = extra + 1200;
       }},
      {Base::kV4Extra, "out", "extra_indices",
       [](RunArgs& a) {
         char* indices = isolate(a.extra_indices, 2 * 4 * sizeof(int32_t));
         a.extra_indices = reinterpret_cast<const int32_t*>(indices);
         a.out = indices;
       }},
      {Base::kV4Extra, "out", "extra_topk_lens",
       [](RunArgs& a) {
         char* lens = isolate(a.extra_topk_lens, 2 * sizeof(int32_t));
         a.extra_topk_lens = reinterpret_cast<const int32_t*>(lens);
         a.out = lens;
       }},
      {Base::kFp8, "out", "k_scale_ptr",
       [](RunArgs& a) {
         a.k_scale = kNaN;
         a.k_scale_ptr = static_cast<const float*>(a.out) + 100;
       }},
      {Base::kSinksLse, "lse", "q",
       [](RunArgs& a) { a.lse = static_cast<float*>(const_cast<void*>(a.q)) + 8; }},
  };
  for (const Overlap& c : cases) {
    ValidCall call(c.base);
    c.mutate(call.args);
    const Status st = mlakit::validate_args(call.in.problem, call.args, 0, nullptr, 0);
    EXPECT_TRUE(
        is_error(st, StatusCode::kInvalidArgument, c.written,
                 {"memory apart from every other argument", std::string("overlap ") + c.other}))
        << c.written << " over " << c.other;
    std::unique_ptr<Decoder> decoder;
    ASSERT_TRUE(Decoder::create(call.in.problem, {.backend = "cpu"}, &decoder).ok());
    EXPECT_EQ(decoder->run(call.args, nullptr, 0, nullptr).message(), st.message());
  }
  // The workspace, which the cpu backend never takes: validate_args directly.
  ValidCall call(Base::kDense);
  alignas(256) static uint8_t shared[1 << 16];
  call.args.out = shared;
  EXPECT_TRUE(is_error(mlakit::validate_args(call.in.problem, call.args, 1024, shared + 4096, 1024),
                       StatusCode::kInvalidArgument, "out", {"overlap workspace"}));
  EXPECT_TRUE(mlakit::validate_args(call.in.problem, call.args, 1024, shared + 8192, 1024).ok())
      << "out ends where the workspace starts";
}

// The block table is judged by its shape, [b, block_table_stride], not by the pages max_seq_len
// lets a run read: an out placed in a row's unused tail was accepted, and written over the table
// (found by the C API fuzz target).
TEST(ValidateArgs, OutInTheBlockTablesUnusedColumnsIsRefused) {
  ValidCall call(Base::kDense);
  Problem p = call.in.problem;
  p.max_seq_len = p.page_size;  // a run reads one page id a row
  call.args.batch = 1;
  call.args.block_table_stride = 8;  // the table holds 2 rows of 4: 8 ids
  call.args.out = const_cast<int32_t*>(call.args.block_table) + 4;
  EXPECT_TRUE(is_error(mlakit::validate_args(p, call.args, 0, nullptr, 0),
                       StatusCode::kInvalidArgument, "out", {"overlap block_table"}));
  // A sparse run ignores the block table, whatever it holds: not judged.
  ValidCall sparse(Base::kSparse);
  sparse.args.block_table = static_cast<const int32_t*>(sparse.args.out);
  sparse.args.block_table_stride = -1;
  EXPECT_TRUE(mlakit::validate_args(sparse.in.problem, sparse.args, 0, nullptr, 0).ok());
}

// Buffers that touch without overlapping are fine: q, then out right after its last byte.
TEST(ValidateArgs, AdjacentBuffersAreAccepted) {
  ValidCall call(Base::kDense);
  std::vector<uint8_t> both(call.in.q.size() + call.out.size() + 16);
  uint8_t* q = both.data() + (-reinterpret_cast<uintptr_t>(both.data()) & 15);
  std::memcpy(q, call.in.q.data(), call.in.q.size());
  call.args.q = q;
  call.args.out = q + call.in.q.size();
  std::unique_ptr<Decoder> decoder;
  ASSERT_TRUE(Decoder::create(call.in.problem, {.backend = "cpu"}, &decoder).ok());
  const Status st = decoder->run(call.args, nullptr, 0, nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
}

// ---------------------------------------------------------------------------------------------
// Decoder::create and can_run
// ---------------------------------------------------------------------------------------------

TEST(DecoderCreate, UnknownBackend) {
  std::unique_ptr<Decoder> decoder;
  EXPECT_TRUE(is_error(Decoder::create(valid_problem(), {.backend = "nope"}, &decoder),
                       StatusCode::kInvalidArgument, "backend", {"cpu", "given nope"}));
  EXPECT_EQ(decoder, nullptr);
}

TEST(DecoderCreate, UnknownTactic) {
  std::unique_ptr<Decoder> decoder;
  EXPECT_TRUE(is_error(Decoder::create(valid_problem(), {.backend = "cpu", .tactic = 5}, &decoder),
                       StatusCode::kInvalidArgument, "tactic",
                       {"0 (reference)", "backend cpu", "given 5"}));
  EXPECT_EQ(decoder, nullptr);
  ASSERT_TRUE(Decoder::create(valid_problem(), {.backend = "cpu", .tactic = 0}, &decoder).ok());
  EXPECT_EQ(decoder->backend_name(), "cpu");
  EXPECT_EQ(decoder->tactic(), 0);
  EXPECT_EQ(decoder->workspace_bytes(), 0u);
  EXPECT_FALSE(decoder->device_memory());
}

TEST(DecoderCreate, NullDecoderPointer) {
  EXPECT_TRUE(is_error(Decoder::create(valid_problem(), {.backend = "cpu"}, nullptr),
                       StatusCode::kInvalidArgument, "decoder", {"given nullptr"}));
}

TEST(DecoderCreate, AutoPicksTheCpuBackendWithoutAGpu) {
  if (mlakit::current_device().present) GTEST_SKIP() << "a GPU is present";
  std::unique_ptr<Decoder> decoder;
  const Status st = Decoder::create(valid_problem(), {}, &decoder);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(decoder->backend_name(), "cpu");
}

TEST(CanRun, UnknownBackend) {
  EXPECT_TRUE(is_error(mlakit::can_run("nope", valid_problem()), StatusCode::kInvalidArgument,
                       "backend", {"cpu", "given nope"}));
}

TEST(CanRun, CpuRunsAnyValidProblem) {
  Problem p = valid_problem();
  p.page_size = 48, p.h_q = 128, p.s_q = 16, p.has_sinks = true, p.topk = 2048;
  EXPECT_TRUE(mlakit::can_run("cpu", p).ok());
  p.topk = 1024, p.extra_topk = 128, p.extra_page_size = 64;  // the V4 layout's shape
  p.kv_dtype = DType::kFP8E4M3, p.kv_layout = KvLayout::kFp8V4, p.d_qk = 512;
  EXPECT_TRUE(mlakit::can_run("cpu", p).ok());
}

// The GPU backends compiled into this build refuse what they do not run, by name: the V4 layout
// and the extra cache. Their can_run is asked directly (it needs no GPU), as if a device were
// present.
TEST(CanRun, GpuBackendsRefuseTheV4LayoutAndTheExtraCacheByName) {
  Problem v4 = valid_problem();
  v4.kv_dtype = DType::kFP8E4M3, v4.kv_layout = KvLayout::kFp8V4, v4.d_qk = 512, v4.topk = 64;
  Problem extra = valid_problem();
  extra.kv_dtype = DType::kFP8E4M3, extra.kv_layout = KvLayout::kFp8Blockwise, extra.topk = 64;
  extra.extra_topk = 16;
  ASSERT_TRUE(mlakit::validate(v4).ok() && mlakit::validate(extra).ok());
  const mlakit::DeviceInfo h100{
      .present = true, .device = 0, .name = "H100", .sm_major = 9, .sm_count = 132};
  int gpu_backends = 0;
  for (const mlakit::BackendEntry* entry : mlakit::backend_registry()) {
    if (!entry->device_memory) continue;
    // A build without CUDA lists its GPU backends as absent (src/core/registry.cc).
    if (entry->can_run(valid_problem(), h100).message().find("not in this build") !=
        std::string::npos) {
      continue;
    }
    ++gpu_backends;
    const std::string name(entry->name);
    EXPECT_TRUE(is_error(entry->can_run(v4, h100), StatusCode::kUnsupported, "kv_layout fp8_v4",
                         {"backend " + name}));
    EXPECT_TRUE(is_error(entry->can_run(extra, h100), StatusCode::kUnsupported,
                         "an extra cache (extra_topk 16)", {"backend " + name}));
  }
  if (gpu_backends == 0) GTEST_SKIP() << "no GPU backend in this build";
}

}  // namespace
}  // namespace mlakit_test
