// GPU tests of sparse top-k decode against the cpu reference, sm90 (plan/compact.h, gather.cuh and
// the sparse kernels; sm_90 devices only): a bf16/fp16 q over a cache of q's type, the V3.2
// blockwise layout (656 bytes a token) or the V4 one (584; with and without an extra cache, whose
// page size may differ), page sizes 1..576, h_q 1..128 (narrow tiles of 16 and 32 rows, the wide
// tile, several tiles per row), s_q 1..8, top-k from 1 to 16384 with per-request lengths, -1
// slots, sinks, lse and every tactic; indices out of range skipped (never read); PDL bitwise. The
// cases and checks: sparse_test_util.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/sm90/launch.h"
#include "core/check.h"
#include "sparse_test_util.h"

namespace mlakit::testing {
namespace {

// Head counts of each tile (16, 32 rows narrow; 64 wide; several tiles), both layouts and q types,
// top-k sizes around a block (64 tokens) and a chunk, per-request top-k lengths, page sizes, -1
// tails as a top-k op emits them.
TEST(Sm90Sparse, EveryTacticAgainstReference) {
  MLAKIT_SKIP_WITHOUT_SM90();
  const SparseCase cases[] = {
      {.h_q = 16, .topk = 128},
      {.blockwise = true, .h_q = 16, .topk = 2048, .topk_lens = true, .sinks = true},
      {.q = DType::kFP16, .page_size = 16, .h_q = 1, .s_q = 4, .topk = 100},
      {.blockwise = true, .page_size = 1, .h_q = 8, .s_q = 2, .topk = 64, .len = 300},
      {.q = DType::kFP16, .blockwise = true, .h_q = 32, .topk = 65, .sinks = true},
      {.blockwise = true, .page_size = 128, .h_q = 40, .s_q = 2, .topk = 512, .topk_lens = true},
      {.h_q = 64, .s_q = 1, .topk = 1, .batch = 5},
      {.blockwise = true, .h_q = 64, .s_q = 4, .topk = 2048, .batch = 2, .len = 4000},
      {.blockwise = true, .h_q = 128, .topk = 4096, .batch = 2, .len = 8000, .sinks = true},
      {.q = DType::kFP16, .page_size = 32, .h_q = 128, .s_q = 2, .topk = 300, .topk_lens = true},
      {.blockwise = true, .h_q = 3, .s_q = 8, .topk = 1000, .batch = 1, .len = 5000},
      {.blockwise = true, .h_q = 16, .s_q = 2, .topk = 63, .batch = 4, .odd_scales = true},
      {.q = DType::kFP16, .blockwise = true, .h_q = 20, .topk = 129, .odd_scales = true},
      {.blockwise = true, .h_q = 64, .topk = 192, .batch = 2, .odd_scales = true},
      {.blockwise = true, .h_q = 32, .topk = 300, .batch = 2, .topk_lens = true, .sinks = true},
      {.blockwise = true, .h_q = 20, .s_q = 2, .topk = 129, .batch = 3, .odd_scales = true},
      // -1 tails of whole blocks past requests shorter than topk (lengths in [37, 600)).
      {.blockwise = true, .h_q = 64, .topk = 512, .batch = 4, .len = 300, .tails = true},
      {.blockwise = true, .h_q = 16, .s_q = 2, .topk = 256, .batch = 3, .len = 100, .tails = true},
      // Two query tiles, the second partial; -1 tails at 128 heads.
      {.q = DType::kFP16,
       .blockwise = true,
       .h_q = 96,
       .topk = 777,
       .batch = 3,
       .len = 1500,
       .topk_lens = true,
       .odd_scales = true},
      {.blockwise = true, .h_q = 128, .s_q = 2, .topk = 512, .batch = 3, .len = 300, .tails = true},
      // k_scale scales the NoPE part only (tactics 8-11 and 13 scaled the RoPE part too before
      // the twenty-seventh session).
      {.q = DType::kFP16, .blockwise = true, .h_q = 16, .topk = 200, .k_scale = 0.75f},
      {.blockwise = true, .h_q = 32, .s_q = 2, .topk = 96, .batch = 2, .k_scale = 1.5f},
  };
  uint64_t seed = 7100;
  for (const SparseCase& c : cases) check_each_tactic(c, &seed);
  for (const SparseCase& c : magnitude_cases()) check_each_tactic(c, &seed);
}

// The split kernel's cluster schedule (tactic 12) with C clusters of S CTAs forced (the host picks
// the shape from the batch and the occupancy, so the sweeps above reach only some): every S 1..8
// (3, 5, 6, 7 do not divide the 64 rows of a tile), one cluster a request (merged into the
// output) and three (partials for the combine kernel); h_q 40 (a partial tile), s_q 2, top-k
// lengths (one request's 0), sinks, -1 slots; and indices out of range, skipped.
TEST(Sm90Sparse, SplitClusterShapes) {
  MLAKIT_SKIP_WITHOUT_SM90();
  const SparseCase cases[] = {
      {.blockwise = true,
       .h_q = 40,
       .s_q = 2,
       .topk = 300,
       .batch = 3,
       .len = 500,
       .topk_lens = true,
       .sinks = true},
      {.q = DType::kFP16, .blockwise = true, .h_q = 128, .topk = 700, .batch = 2, .len = 900}};
  uint64_t seed = 7700;
  for (const SparseCase& c : cases) {
    for (int32_t size = 1; size <= sm90::kMaxClusterCtas; ++size) {
      for (const int32_t clusters : {1, 3}) {
        for (const bool corrupt : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << "C " << clusters << " S " << size << (corrupt ? " corrupt" : ""));
          const sm90::ClusterShape shape{.clusters = clusters, .size = size};
          check(c, seed++, sm90::kSplitClusterTactic, corrupt, kSparseBackend, &shape);
        }
      }
    }
  }
}

// A batch of many rows (split-KV plans of hundreds of requests), and a long top-k of one row
// (one request split over every SM and combined).
TEST(Sm90Sparse, ManyRowsAndOneLongRow) {
  MLAKIT_SKIP_WITHOUT_SM90();
  uint64_t seed = 7200;
  check_each_tactic({.blockwise = true, .h_q = 16, .s_q = 2, .topk = 256, .batch = 300, .len = 600},
                    &seed);
  check_each_tactic({.blockwise = true, .h_q = 128, .topk = 16384, .batch = 1, .len = 20000},
                    &seed);
}

// Out-of-range indices (past the cache, INT32_MAX, negative other than -1) in used slots and
// anything past a request's top-k length are skipped, never read: the result equals the
// reference's with those slots empty.
TEST(Sm90Sparse, OutOfRangeIndicesAreSkipped) {
  MLAKIT_SKIP_WITHOUT_SM90();
  uint64_t seed = 7300;
  const SparseCase cases[] = {
      {.blockwise = true, .h_q = 16, .topk = 512, .topk_lens = true},
      {.h_q = 64, .s_q = 2, .topk = 200, .topk_lens = true, .sinks = true},
      {.blockwise = true, .h_q = 128, .topk = 1000, .batch = 2},
  };
  for (const SparseCase& c : cases) check_each_tactic(c, &seed, /*corrupt=*/true);
}

TEST(Sm90Sparse, EmptyRows) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_blockwise_empty_rows("sm90");
}

TEST(Sm90Sparse, PdlBitwiseEqual) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_sparse_pdl_bitwise({.blockwise = true,
                            .h_q = 64,
                            .s_q = 2,
                            .topk = 512,
                            .batch = 4,
                            .topk_lens = true,
                            .sinks = true},
                           7500);
}

TEST(Sm90Sparse, V4EveryTacticAgainstReference) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_v4_every_tactic("sm90", 7150);
}

TEST(Sm90Sparse, V4EmptyRows) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_v4_empty_rows("sm90");
}

TEST(Sm90Sparse, V4PdlBitwiseEqual) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_v4_pdl_bitwise("sm90");
}

// What sm90 does not run sparse is refused by name.
TEST(Sm90Sparse, RefusalsNameTheArgument) {
  MLAKIT_SKIP_WITHOUT_SM90();
  Problem p = problem_of({.blockwise = true});
  p.q_dtype = DType::kFP8E4M3;
  EXPECT_NE(can_run(kSparseBackend, p).message().find("q_dtype"), std::string::npos);
  p = problem_of({});
  p.kv_dtype = DType::kFP8E4M3;
  EXPECT_NE(can_run(kSparseBackend, p).message().find("kv_dtype"), std::string::npos);
  p = problem_of({.blockwise = true});
  p.out_dtype = DType::kFP16;
  EXPECT_NE(can_run(kSparseBackend, p).message().find("out_dtype"), std::string::npos);
  EXPECT_TRUE(can_run(kSparseBackend, problem_of({.blockwise = true, .page_size = 1})).ok());
  // An extra cache only with the V4 layout.
  p = problem_of({.blockwise = true, .extra_topk = 64});
  EXPECT_NE(can_run(kSparseBackend, p).message().find("extra"), std::string::npos);
  EXPECT_TRUE(can_run(kSparseBackend, problem_of({.v4 = true, .extra_topk = 64})).ok());
}

// Sparse decode under the sanitizers (scripts/sanitize.sh): every tactic of each backend on
// small cases of both layouts and each tile, with out-of-range indices in used slots.
TEST(Sm90Sanitize, Sparse) {
  MLAKIT_SKIP_WITHOUT_SM90();
  uint64_t seed = 7900;
  check_each_tactic({.h_q = 16, .s_q = 2, .topk = 100, .batch = 2, .len = 300, .sinks = true},
                    &seed, /*corrupt=*/true);
  check_each_tactic({.blockwise = true, .h_q = 64, .topk = 200, .batch = 2, .topk_lens = true},
                    &seed, /*corrupt=*/true);
  check_each_tactic({.blockwise = true, .page_size = 1, .h_q = 128, .topk = 130, .batch = 1},
                    &seed);
  check_each_tactic(
      {.blockwise = true, .h_q = 100, .topk = 200, .batch = 2, .len = 400, .topk_lens = true},
      &seed, /*corrupt=*/true);
  check_each_tactic({.blockwise = true, .h_q = 16, .s_q = 2, .topk = 130, .batch = 2, .len = 300},
                    &seed, /*corrupt=*/true);
  check_each_tactic(
      {.q = DType::kFP16, .blockwise = true, .h_q = 24, .topk = 70, .batch = 1, .odd_scales = true},
      &seed);
  check_each_tactic(kV4SanitizeCase, &seed, /*corrupt=*/true);
  check_each_tactic({.h_q = 64, .s_q = 2, .topk = 64, .batch = 1, .v4 = true, .extra_topk = 64},
                    &seed);
}

}  // namespace
}  // namespace mlakit::testing
