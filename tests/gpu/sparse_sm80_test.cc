// GPU tests of sparse top-k decode against the cpu reference, sm80: the dense kernels over the
// compacted slots as pages of one token, for caches of q's type, the e4m3 cache with one scale and
// the V3.2 and V4 layouts (widened with their group scales); every tile and schedule, out-of-range
// indices skipped, empty rows, PDL bitwise, refusals by name (the cases and checks:
// sparse_test_util.h).
#include <gtest/gtest.h>

#include <string>

#include "core/check.h"
#include "sparse_test_util.h"

namespace mlakit::testing {
namespace {

// sm80: the dense kernels over the compacted slots, for every tile, dense cache kind and
// schedule; out-of-range indices skipped.
TEST(Sm80Sparse, EveryTacticAgainstReference) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const SparseCase cases[] = {
      {.h_q = 16, .topk = 128, .topk_lens = true},
      {.q = DType::kFP16, .page_size = 1, .h_q = 3, .s_q = 4, .topk = 100, .sinks = true},
      {.h_q = 32, .s_q = 2, .topk = 700, .fp8 = true},
      {.q = DType::kFP16, .page_size = 16, .h_q = 64, .topk = 65, .batch = 4, .fp8 = true},
      {.h_q = 128,
       .s_q = 2,
       .topk = 2048,
       .batch = 2,
       .len = 4000,
       .topk_lens = true,
       .sinks = true},
  };
  uint64_t seed = 7600;
  for (const SparseCase& c : cases) check_each_tactic(c, &seed, false, "sm80");
  for (const SparseCase& c : magnitude_cases()) check_each_tactic(c, &seed, false, "sm80");
  check_each_tactic({.h_q = 64, .topk = 300, .topk_lens = true, .fp8 = true}, &seed, true, "sm80");
  check_each_tactic({.h_q = 8, .s_q = 2, .topk = 64, .batch = 5}, &seed, true, "sm80");
}

// sm80 over the V3.2 layout: each tile (16, 32, 64 rows; several 64-row tiles), both q types,
// top-k sizes around a tile (32 tokens) and long ones, MTP, per-request lengths, sinks, page sizes
// (1, odd), scales that are not powers of two, out-of-range indices and -1 tails.
TEST(Sm80Sparse, BlockwiseEveryTacticAgainstReference) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const SparseCase cases[] = {
      {.blockwise = true, .h_q = 16, .topk = 2048, .topk_lens = true, .sinks = true},
      {.blockwise = true, .page_size = 1, .h_q = 8, .s_q = 2, .topk = 64, .len = 300},
      {.q = DType::kFP16, .blockwise = true, .h_q = 32, .topk = 65, .sinks = true},
      {.blockwise = true, .page_size = 17, .h_q = 40, .s_q = 2, .topk = 31, .topk_lens = true},
      {.blockwise = true, .h_q = 64, .s_q = 2, .topk = 1, .batch = 4},
      {.blockwise = true, .h_q = 128, .topk = 2048, .batch = 2, .len = 4000, .sinks = true},
      {.q = DType::kFP16, .blockwise = true, .h_q = 128, .s_q = 2, .topk = 33, .batch = 2},
      {.blockwise = true, .h_q = 3, .s_q = 4, .topk = 1000, .batch = 1, .len = 5000},
      {.blockwise = true, .h_q = 16, .s_q = 2, .topk = 63, .batch = 4, .odd_scales = true},
      {.q = DType::kFP16, .blockwise = true, .h_q = 20, .topk = 129, .odd_scales = true},
      {.blockwise = true, .h_q = 64, .topk = 192, .batch = 2, .odd_scales = true},
      {.blockwise = true, .h_q = 64, .topk = 512, .batch = 3, .len = 300, .tails = true},
      {.q = DType::kFP16, .blockwise = true, .h_q = 16, .topk = 200, .k_scale = 0.75f},
      {.blockwise = true, .h_q = 128, .topk = 96, .batch = 2, .k_scale = 1.5f},
  };
  uint64_t seed = 7700;
  for (const SparseCase& c : cases) check_each_tactic(c, &seed, false, "sm80");
  for (const SparseCase& c : magnitude_cases()) check_each_tactic(c, &seed, false, "sm80");
  check_each_tactic({.blockwise = true, .h_q = 64, .topk = 300, .topk_lens = true}, &seed, true,
                    "sm80");
  check_each_tactic({.blockwise = true, .h_q = 16, .s_q = 2, .topk = 100, .batch = 3}, &seed, true,
                    "sm80");
}

TEST(Sm80Sanitize, Sparse) {
  MLAKIT_SKIP_WITHOUT_GPU();
  uint64_t seed = 7950;
  check_each_tactic({.h_q = 16, .s_q = 2, .topk = 100, .batch = 2, .len = 300, .sinks = true},
                    &seed, /*corrupt=*/true, "sm80");
  check_each_tactic({.h_q = 128, .topk = 70, .batch = 1, .fp8 = true}, &seed, true, "sm80");
  check_each_tactic({.blockwise = true, .h_q = 16, .topk = 100, .batch = 2, .len = 300}, &seed,
                    true, "sm80");
  check_each_tactic({.q = DType::kFP16, .blockwise = true, .h_q = 64, .topk = 70, .batch = 1},
                    &seed, true, "sm80");
  check_each_tactic(kV4SanitizeCase, &seed, /*corrupt=*/true, "sm80");
}

// sm80 over the V4 layout: sm90's cases, empty rows, PDL on and off.
TEST(Sm80Sparse, V4EveryTacticAgainstReference) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_v4_every_tactic("sm80", 7750);
}

TEST(Sm80Sparse, EmptyRows) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_blockwise_empty_rows("sm80");
  check_v4_empty_rows("sm80");
}

TEST(Sm80Sparse, V4PdlBitwiseEqual) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_v4_pdl_bitwise("sm80");
}

// An extra cache is V4's only: refused by name with the other layouts.
TEST(Sm80Sparse, ExtraCacheOfV32RefusedByName) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const Status st = can_run("sm80", problem_of({.blockwise = true, .extra_topk = 64}));
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("extra"), std::string::npos) << st.message();
  // V3.2 and V4 are sparse layouts: a dense problem over them is refused by name.
  for (const SparseCase& c :
       {SparseCase{.blockwise = true, .topk = 0}, SparseCase{.topk = 0, .v4 = true}}) {
    const Status dense = can_run("sm80", problem_of(c));
    EXPECT_FALSE(dense.ok());
    EXPECT_NE(dense.message().find(c.v4 ? "fp8_v4" : "fp8_blockwise"), std::string::npos)
        << dense.message();
  }
}

}  // namespace
}  // namespace mlakit::testing
