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
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backends/sm80/launch.h"
#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

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
  check_cases(kSweep, 100, "sm80");
}

// Edges beyond the sweep (common_edges), each with both tactics.
TEST(Sm80, Edges) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_each_tactic(common_edges(), 500, "sm80");
}

// The short sweep that scripts/sanitize.sh runs under compute-sanitizer: the three tile configs
// (16, 32 and 64 rows), tactics 0, 1 and 4 (the part planned before griddepcontrol.wait), split
// and unsplit requests, small enough for racecheck.
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
      {.page_size = 32,
       .h_q = 32,
       .lens = Lens::kVariable,
       .lse = true,
       .tactic = 4,
       .batch = 5,
       .len = 300},
  };
  check_cases(small, 900, "sm80");
}

// Every tactic under the sanitizers (scripts/sanitize.sh): each tile, MTP, sinks.
TEST(Sm80Sanitize, EveryTactic) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const Case cases[] = {
      {.page_size = 16,
       .h_q = 16,
       .s_q = 2,
       .lens = Lens::kVariable,
       .sinks = true,
       .lse = true,
       .batch = 3,
       .len = 100},
      {.dtype = DType::kFP16,
       .page_size = 64,
       .h_q = 128,
       .lens = Lens::kSkewed,
       .lse = true,
       .len = 40},
  };
  check_each_tactic(cases, 960, "sm80");
}

// The 64-row tile has two loops (config.h): score and output warps (kRoles) where three KV
// stages fit (sm_90: four), the plain loop on sm_80's 163 KB. Both are compared with the reference
// here, on one device: the plain one by planning for sm_80's shared memory, kRoles with three
// stages by planning for a little more than those take.
TEST(Sm80, Tile64BothLoops) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const DeviceInfo device = current_device();
  constexpr size_t kSm80SharedMemory = 166912;  // sm_80's opt-in maximum per block
  const Case cases[] = {
      {.dtype = DType::kFP16, .page_size = 16, .h_q = 128, .lens = Lens::kVariable, .lse = true},
      {.page_size = 64, .h_q = 64, .s_q = 2, .lens = Lens::kSkewed, .sinks = true},
      {.page_size = 1, .h_q = 128, .lens = Lens::kFixed, .lse = true, .batch = 2, .len = 1000},
      {.page_size = 32, .h_q = 40, .s_q = 4, .lens = Lens::kFixed, .batch = 3, .len = 77},
  };
  uint64_t seed = 1300;
  const size_t roles_three_stages =
      sm80::decode_kernel_bf16_m64_roles().smem_fixed_bytes + 3 * sm80::kStageBytes + 1024;
  for (const size_t smem_limit : {size_t{0}, kSm80SharedMemory, roles_three_stages}) {
    for (Case c : cases) {
      for (const int tactic : {0, 1}) {
        c.tactic = tactic;
        SCOPED_TRACE(case_name(c));
        const std::vector<int32_t> lens = case_lengths(c, seed);
        const Problem p = case_problem(c, lens);
        const harness::HostInputs in = harness::make_inputs(p, lens, {.seed = seed++});
        sm80::Setup setup;
        MLAKIT_ASSERT_OK(sm80::make_setup(p, tactic, device, &setup, {.smem_limit = smem_limit}));
        int optin = 0;
        MLAKIT_ASSERT_CUDA(
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device.device));
        const size_t smem = smem_limit != 0 ? smem_limit : static_cast<size_t>(optin);
        // sm_80's limit never fits three stages of the kRoles loop; 227 KB (sm_90) fits four.
        const size_t roles_fixed = sm80::decode_kernel_bf16_m64_roles().smem_fixed_bytes;
        const bool roles = smem >= roles_fixed + 3 * sm80::kStageBytes;
        EXPECT_EQ(setup.roles, roles) << smem << " bytes";
        if (roles) {
          EXPECT_EQ(setup.stages,
                    std::min<size_t>(sm80::kMaxStages, (smem - roles_fixed) / sm80::kStageBytes));
        }
        Output ref, got;
        MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
        harness::DeviceInputs d;
        MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &d));
        harness::DeviceBuffer workspace(std::max<size_t>(setup.layout.bytes, 256));
        StreamHolder st;
        MLAKIT_ASSERT_OK(run_device(
            [&](cudaStream_t stream) { return sm80::run(setup, d.args, workspace.get(), stream); },
            in, d, st.stream, &got));
        const ::testing::AssertionResult result = matches_reference(in, got, ref);
        EXPECT_TRUE(result);
        std::printf("  %-56s %s, %d stages: %s\n", case_name(c).c_str(),
                    setup.roles ? "roles" : "plain", setup.stages, result.message());
      }
    }
  }
}

// s_q 9..16 under every tactic.
TEST(Sm80, LongMtp) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_each_tactic(long_mtp_cases(), 1400, "sm80");
}

TEST(Sm80, WorkspaceTooSmallIsRefused) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_workspace_too_small_is_refused("sm80");
}

TEST(Sm80, RefusesWhatItDoesNotSupport) {
  MLAKIT_SKIP_WITHOUT_GPU();
  std::vector<Refusal> refusals = common_refusals();
  Problem p;
  p.max_seq_len = 1024;
  p.page_size = 48;
  refusals.push_back({p, "page_size 48"});
  expect_refused("sm80", refusals);
}

}  // namespace
}  // namespace mlakit::testing
