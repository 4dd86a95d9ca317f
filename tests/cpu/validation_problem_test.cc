// One test per validation rule of validate(Problem) in src/core/validate.cc (checked at Decoder
// creation), plus the checks of Decoder::create and can_run. Each checks the status code and that
// the message, "<arg>: expected <expected>, given <given>", names the argument and, where it has
// them, the expected and given values. validate_args: validation_args_test.cc and
// validation_buffers_test.cc.
#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>

#include "core/backend.h"
#include "cpu_run.h"
#include "mlakit/mlakit.h"
#include "status_match.h"

namespace mlakit_test {
namespace {

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

// The GPU backends compiled into this build take the V4 layout and its extra cache, and refuse an
// extra cache with another layout by name. Their can_run is asked directly, as if a device were
// present (sm80 also reads the device's shared-memory limit, which fails here: its acceptance of
// V4 is tested on the GPU, Sm80Sparse.V4EveryTacticAgainstReference).
TEST(CanRun, GpuBackendsOnTheV4LayoutAndTheExtraCache) {
  Problem v4 = valid_problem();
  v4.kv_dtype = DType::kFP8E4M3, v4.kv_layout = KvLayout::kFp8V4, v4.d_qk = 512, v4.topk = 64;
  Problem v4_extra = v4;
  v4_extra.extra_topk = 128, v4_extra.extra_page_size = 576;
  Problem extra = valid_problem();
  extra.kv_dtype = DType::kFP8E4M3, extra.kv_layout = KvLayout::kFp8Blockwise, extra.topk = 64;
  extra.extra_topk = 16;
  ASSERT_TRUE(mlakit::validate(v4).ok() && mlakit::validate(v4_extra).ok() &&
              mlakit::validate(extra).ok());
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
    // Both GPU backends run V4, with or without an extra cache, and take an extra cache with V4
    // only. (sm80 also reads the device's shared-memory limit, which this fake H100 has not: then
    // it refuses for that, not for the layout.)
    for (const Problem* p : {&v4, &v4_extra}) {
      const mlakit::Status st = entry->can_run(*p, h100);
      EXPECT_TRUE(st.ok() ||
                  (name == "sm80" && st.message().find("kv_layout") == std::string::npos &&
                   st.message().find("extra") == std::string::npos))
          << name << ": " << st.message();
    }
    EXPECT_TRUE(is_error(entry->can_run(extra, h100), StatusCode::kUnsupported,
                         "an extra cache (extra_topk 16) with kv_layout fp8_blockwise",
                         {"backend " + name, "with fp8_v4"}));
  }
  if (gpu_backends == 0) GTEST_SKIP() << "no GPU backend in this build";
}

}  // namespace
}  // namespace mlakit_test
