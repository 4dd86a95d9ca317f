// GPU tests of the sm80 backend with an fp8 (e4m3, one scale) cache, against the cpu reference:
// q bf16 or fp16 (out alike) or e4m3 (out bf16 or fp16), every page size, h_q 1..128, s_q up to
// 16, length kinds, sinks, lse, every tactic; scales behind device pointers followed by a
// captured graph; PDL on and off bitwise equal.
//
// Tolerance: that of 16-bit inputs (harness::default_tolerance of the 16-bit problem), also with
// an e4m3 q (whose default allows an e4m3 P, as sm90 computes it). The kernel widens the e4m3
// values (and an e4m3 q) exactly to the 16-bit type it computes in, so the only rounding beyond
// the cpu reference's is that of the 16-bit path (P before P V, the output), on the same
// dequantized values.
#include <gtest/gtest.h>

#include "graph_pdl_util.h"
#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

constexpr const char* kBackend = "sm80";

// The tolerance of 16-bit inputs for an output of `dtype`.
harness::Tolerance exact_tolerance(DType dtype) {
  Problem p;
  p.q_dtype = p.kv_dtype = p.out_dtype = dtype;
  return harness::default_tolerance(p);
}

// check_cases with exact_tolerance (every case of a list has the same output dtype or not: each
// case gets its own).
void check_exact(std::span<const Case> cases, uint64_t seed) {
  for (const Case& c : cases) {
    SCOPED_TRACE(case_name(c));
    const harness::Tolerance tolerance = exact_tolerance(c.dtype);
    check_case(c, seed++, kBackend, &tolerance);
  }
}

// {dtype (out, and q unless fp8_q), page size, h_q, s_q, lengths, sinks, lse, tactic, batch, len,
// causal, fp8_kv, fp8_q}: each page size, h_q and q dtype, tiles of 16, 32 and 64 rows, both
// schedules.
const Case kSweep[] = {
    {DType::kBF16, 1, 16, 1, Lens::kVariable, false, true, 0, 0, -1, true, true, false},
    {DType::kFP16, 1, 64, 2, Lens::kSkewed, true, false, 1, 0, -1, true, true, true},
    {DType::kBF16, 16, 1, 4, Lens::kVariable, true, false, 1, 0, -1, true, true, true},
    {DType::kFP16, 16, 128, 1, Lens::kFixed, false, true, 0, 0, -1, true, true, false},
    {DType::kBF16, 32, 32, 1, Lens::kSkewed, true, true, 0, 0, -1, true, true, false},
    {DType::kBF16, 32, 128, 2, Lens::kVariable, false, true, 1, 0, -1, true, true, true},
    {DType::kFP16, 64, 16, 2, Lens::kFixed, true, true, 1, 0, -1, true, true, true},
    {DType::kBF16, 64, 64, 1, Lens::kVariable, false, false, 0, 0, -1, true, true, false},
    {DType::kBF16, 64, 16, 1, Lens::kFixed, true, true, 4, 1, 4001, true, true, true},
    {DType::kFP16, 128, 32, 4, Lens::kVariable, false, true, 1, 0, -1, true, true, false},
    {DType::kBF16, 128, 128, 1, Lens::kSkewed, true, true, 0, 0, -1, true, true, true},
    {DType::kBF16, 64, 128, 8, Lens::kFixed, true, true, 1, 2, 300, true, true, false},
    {DType::kFP16, 32, 40, 3, Lens::kSkewed, true, true, 0, 0, -1, true, true, true},
};

TEST(Sm80Fp8, Sweep) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_exact(kSweep, 3100);
}

// The common edges (long single requests, lengths below s_q, non-causal, all empty, 1100
// requests, odd head counts) with an e4m3 cache, bf16 q and e4m3 q, every tactic.
TEST(Sm80Fp8, Edges) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_each_tactic(with_fp8(common_edges()), 3200, kBackend);
}

// s_q 9..16 with an e4m3 cache, bf16 q and e4m3 q, every tactic.
TEST(Sm80Fp8, LongMtp) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_each_tactic(with_fp8(long_mtp_cases()), 3300, kBackend);
}

TEST(Sm80Fp8Graph, ScalesAndLengthsFollowedByReplays) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_graph_replay(kBackend, 16, {.q = DType::kBF16, .kv = DType::kFP8E4M3});
  check_graph_replay(kBackend, 64,
                     {.q = DType::kFP8E4M3, .kv = DType::kFP8E4M3, .out = DType::kFP16});
}

TEST(Sm80Fp8Pdl, BitwiseEqualWithAndWithout) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_pdl_bitwise(kBackend, 64, {.q = DType::kFP8E4M3, .kv = DType::kFP8E4M3});
}

// For scripts/sanitize.sh: the three tiles, split and unsplit requests, both q kinds.
TEST(Sm80Sanitize, Fp8) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const Case small[] = {
      {DType::kBF16, 32, 16, 2, Lens::kVariable, true, true, 4, 0, 100, true, true, false},
      {DType::kFP16, 64, 64, 2, Lens::kSkewed, false, true, 1, 0, 12, true, true, true},
      {DType::kBF16, 16, 32, 1, Lens::kSkewed, true, true, 0, 0, 40, true, true, true},
  };
  check_exact(small, 3300);
}

}  // namespace
}  // namespace mlakit::testing
