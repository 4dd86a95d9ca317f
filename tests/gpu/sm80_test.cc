// GPU tests of the sm80 backend against the cpu reference.
//
// Random inputs (fresh per case), NaN in unused pages and page tails, out-of-range ids in unused
// block-table slots, output poisoned with NaN before each run; every element is compared.
//
// Tolerance (harness::default_tolerance): |gpu - ref| <= 1e-5 + 2 ulps of the output dtype
// (bf16 2^-7, fp16 2^-10) times max |ref|, and LSE within 2e-3. Why: the scores are exact
// products of 16-bit inputs accumulated in fp32 on both sides; the kernel rounds P to the input
// dtype before P V (relative 2^-9 for bf16, 2^-12 for fp16 per term, with random signs, so the sum
// of those errors stays well below one ulp of the largest output) and both sides round the output
// once, which can differ by one ulp. Split requests add an fp32 combine (LSE-weighted sum of fp32
// partials), far below that.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

struct StreamHolder {
  cudaStream_t stream = nullptr;
  StreamHolder() { cudaStreamCreate(&stream); }
  ~StreamHolder() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

void check_case(const Case& c, uint64_t seed) {
  const std::vector<int32_t> lens = case_lengths(c, seed);
  const Problem p = case_problem(c, lens);
  const harness::HostInputs in = harness::make_inputs(p, lens, {.seed = seed});
  Output ref;
  MLAKIT_ASSERT_OK(cpu_reference(in, &ref));

  std::unique_ptr<Decoder> decoder;
  MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = "sm80", .tactic = c.tactic}, &decoder));
  harness::DeviceInputs device;
  MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
  harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
  StreamHolder s;
  Output got;
  MLAKIT_ASSERT_OK(run_device(*decoder, in, device, workspace.get(), s.stream, &got));
  const ::testing::AssertionResult result = matches_reference(in, got, ref);
  EXPECT_TRUE(result) << case_name(c);
  std::printf("  %-56s %s\n", case_name(c).c_str(), result.message());
}

// Every pair of values of (dtype, page size, h_q, s_q, lengths, sinks, lse, tactic) appears in
// at least one case (a greedy pairwise covering; 25 cases, one per page size x h_q).
const Case kSweep[] = {
    {DType::kBF16, 1, 1, 8, Lens::kFixed, true, false, 0},
    {DType::kFP16, 1, 16, 1, Lens::kVariable, false, true, 0},
    {DType::kFP16, 1, 32, 4, Lens::kVariable, true, true, 1},
    {DType::kBF16, 1, 64, 2, Lens::kSkewed, false, false, 1},
    {DType::kFP16, 1, 128, 1, Lens::kFixed, true, false, 1},
    {DType::kBF16, 16, 1, 4, Lens::kVariable, true, false, 1},
    {DType::kBF16, 16, 16, 1, Lens::kSkewed, false, false, 0},
    {DType::kBF16, 16, 32, 2, Lens::kFixed, false, false, 1},
    {DType::kFP16, 16, 64, 8, Lens::kFixed, false, true, 0},
    {DType::kFP16, 16, 128, 8, Lens::kFixed, false, true, 1},
    {DType::kBF16, 32, 1, 2, Lens::kSkewed, true, true, 0},
    {DType::kFP16, 32, 16, 4, Lens::kVariable, false, false, 1},
    {DType::kFP16, 32, 32, 4, Lens::kFixed, false, true, 1},
    {DType::kFP16, 32, 64, 1, Lens::kVariable, true, true, 1},
    {DType::kBF16, 32, 128, 8, Lens::kVariable, true, true, 0},
    {DType::kFP16, 64, 1, 8, Lens::kVariable, false, true, 0},
    {DType::kBF16, 64, 16, 2, Lens::kFixed, true, false, 0},
    {DType::kFP16, 64, 32, 1, Lens::kSkewed, true, true, 1},
    {DType::kBF16, 64, 64, 8, Lens::kFixed, false, false, 0},
    {DType::kBF16, 64, 128, 4, Lens::kSkewed, false, false, 0},
    {DType::kFP16, 128, 1, 1, Lens::kFixed, false, false, 1},
    {DType::kFP16, 128, 16, 8, Lens::kSkewed, false, true, 1},
    {DType::kBF16, 128, 32, 8, Lens::kVariable, false, false, 0},
    {DType::kBF16, 128, 64, 4, Lens::kFixed, false, true, 0},
    {DType::kFP16, 128, 128, 2, Lens::kVariable, true, false, 0},
};

TEST(Sm80, Sweep) {
  MLAKIT_SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  for (const Case& c : kSweep) {
    SCOPED_TRACE(case_name(c));
    check_case(c, seed++);
  }
}

// Edges beyond the sweep, each with both tactics.
TEST(Sm80, Edges) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const Case edges[] = {
      // Batch 1, one long request: split across every SM, then combined.
      {.h_q = 128, .lens = Lens::kFixed, .lse = true, .batch = 1, .len = 4001},
      {.h_q = 16, .lens = Lens::kFixed, .sinks = true, .lse = true, .batch = 1, .len = 4001},
      // Lengths shorter than s_q: some query tokens see nothing (out 0, lse -inf).
      {.page_size = 16,
       .h_q = 16,
       .s_q = 8,
       .lens = Lens::kFixed,
       .sinks = true,
       .lse = true,
       .batch = 2,
       .len = 3},
      {.page_size = 1,
       .h_q = 32,
       .s_q = 4,
       .lens = Lens::kVariable,
       .lse = true,
       .batch = 7,
       .len = 3},
      // Non-causal MTP: every query token sees all L.
      {.dtype = DType::kFP16,
       .h_q = 64,
       .s_q = 2,
       .lens = Lens::kVariable,
       .lse = true,
       .causal = false},
      // Every request empty.
      {.h_q = 16, .lens = Lens::kFixed, .sinks = true, .lse = true, .batch = 4, .len = 0},
      // More requests than the plan kernel's threads (its scans carry across iterations).
      {.page_size = 16, .h_q = 16, .lens = Lens::kVariable, .lse = true, .batch = 1100, .len = 24},
      // Odd head counts: partial query tiles.
      {.page_size = 32, .h_q = 5, .s_q = 3, .lens = Lens::kVariable, .lse = true},
      {.page_size = 32, .h_q = 40, .s_q = 3, .lens = Lens::kSkewed, .sinks = true, .lse = true},
  };
  uint64_t seed = 500;
  for (Case c : edges) {
    for (int tactic = 0; tactic < 2; ++tactic) {
      c.tactic = tactic;
      SCOPED_TRACE(case_name(c));
      check_case(c, seed++);
    }
  }
}

// The short sweep that scripts/sanitize.sh runs under compute-sanitizer: the three tile configs
// (16, 32 and 64 rows), both tactics, split and unsplit requests, small enough for racecheck.
TEST(Sm80Sanitize, Small) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const Case small[] = {
      {.page_size = 16,
       .h_q = 16,
       .lens = Lens::kVariable,
       .sinks = true,
       .lse = true,
       .tactic = 0,
       .len = 100},
      {.dtype = DType::kFP16,
       .page_size = 64,
       .h_q = 64,
       .s_q = 2,
       .lens = Lens::kSkewed,
       .lse = true,
       .tactic = 1,
       .len = 12},
      {.page_size = 1,
       .h_q = 128,
       .lens = Lens::kFixed,
       .sinks = true,
       .tactic = 0,
       .batch = 2,
       .len = 150},
      {.page_size = 128,
       .h_q = 8,
       .s_q = 2,
       .lens = Lens::kSkewed,
       .lse = true,
       .tactic = 1,
       .len = 10},
  };
  uint64_t seed = 900;
  for (const Case& c : small) {
    SCOPED_TRACE(case_name(c));
    check_case(c, seed++);
  }
}

TEST(Sm80, WorkspaceTooSmallIsRefused) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const Case c{.h_q = 64, .lens = Lens::kFixed, .batch = 2, .len = 2000};
  const std::vector<int32_t> lens = case_lengths(c, 1);
  const Problem p = case_problem(c, lens);
  const harness::HostInputs in = harness::make_inputs(p, lens, {.seed = 1});
  std::unique_ptr<Decoder> decoder;
  MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = "sm80"}, &decoder));
  harness::DeviceInputs device;
  MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
  const size_t bytes = decoder->workspace_bytes();
  ASSERT_GT(bytes, 0u);
  harness::DeviceBuffer workspace(bytes);
  const Status st = decoder->run(device.args, workspace.get(), bytes - 1, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("workspace_size"), std::string::npos) << st.message();
}

TEST(Sm80, RefusesWhatItDoesNotSupport) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Problem base;
  base.max_seq_len = 1024;
  struct Refusal {
    Problem problem;
    const char* mentions;
  };
  std::vector<Refusal> refusals;
  Problem p = base;
  p.kv_dtype = DType::kFP8E4M3;
  p.q_dtype = DType::kBF16;
  refusals.push_back({p, "kv_dtype"});
  p = base;
  p.topk = 2048;
  refusals.push_back({p, "sparse"});
  p = base;
  p.s_q = 9;
  refusals.push_back({p, "s_q 9"});
  p = base;
  p.page_size = 48;
  refusals.push_back({p, "page_size 48"});
  for (const Refusal& r : refusals) {
    const Status st = can_run("sm80", r.problem);
    EXPECT_EQ(st.code(), StatusCode::kUnsupported) << describe(r.problem) << ": " << st.to_string();
    EXPECT_NE(st.message().find(r.mentions), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace mlakit::testing
