// GPU tests of the sm90 backend with an fp8 (e4m3, one scale) cache, against the cpu reference,
// on sm_90 devices only: the narrow tile of 16 or 32 rows (decode_fp8_narrow.cuh; tiles of 32 rows
// past 32), q bf16 or fp16 (out alike: the cache widened in registers; on the wide tile widened in
// shared memory, Widen::kFp8, or split into two e4m3 parts on fp8 wgmma, Widen::kQSplit) or e4m3
// (out bf16 or fp16: both products on fp8 wgmma, also on the wide tile, decode_fp8_wide.cuh), page
// sizes 32, 64 and 128, h_q 1..128, s_q up to 16, length kinds, sinks, lse, every tactic;
// device-side scales followed by graph replays; PDL bitwise.
//
// Tolerance: harness::default_tolerance: for a 16-bit q that of 16-bit inputs (the widening is
// exact); for an e4m3 q the documented error of an e4m3 P (relative L2 below 3e-2).
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "backends/sm90/launch.h"
#include "graph_pdl_util.h"
#include "harness/timing.h"
#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

constexpr const char* kBackend = "sm90";

// {dtype (out, and q unless fp8_q), page size, h_q, s_q, lengths, sinks, lse, tactic, batch, len,
// causal, fp8_kv, fp8_q}: each page size, q kind and output dtype; tiles of 16 and 32 rows, partial
// and several per request (h_q x s_q up to 1024); every schedule.
const Case kSweep[] = {
    {DType::kBF16, 64, 16, 1, Lens::kVariable, false, true, 3, 0, -1, true, true, true},
    {DType::kBF16, 64, 16, 1, Lens::kVariable, true, true, 4, 0, -1, true, true, false},
    {DType::kFP16, 32, 16, 2, Lens::kSkewed, true, false, 5, 0, -1, true, true, true},
    {DType::kFP16, 128, 32, 1, Lens::kFixed, false, true, 3, 3, 700, true, true, false},
    {DType::kBF16, 32, 1, 8, Lens::kVariable, true, true, 4, 0, -1, true, true, true},
    {DType::kBF16, 128, 3, 5, Lens::kSkewed, false, true, 5, 0, -1, true, true, false},
    {DType::kFP16, 64, 8, 4, Lens::kFixed, true, true, 3, 2, 130, true, true, true},
    {DType::kBF16, 64, 64, 1, Lens::kVariable, true, true, 3, 0, -1, true, true, true},
    {DType::kBF16, 32, 64, 2, Lens::kFixed, false, true, 4, 0, -1, true, true, false},
    {DType::kFP16, 128, 128, 1, Lens::kSkewed, true, true, 3, 0, -1, true, true, true},
    {DType::kBF16, 64, 128, 2, Lens::kVariable, false, false, 5, 0, -1, true, true, false},
    {DType::kBF16, 128, 128, 8, Lens::kFixed, true, true, 4, 0, 300, true, true, true},
    {DType::kFP16, 32, 40, 3, Lens::kVariable, true, true, 3, 0, -1, true, true, false},
    {DType::kBF16, 64, 16, 1, Lens::kFixed, true, true, 3, 1, 4001, true, true, true},
    {DType::kBF16, 64, 128, 1, Lens::kFixed, false, true, 5, 1, 4001, true, true, false},
    // The wide tile (e4m3 q): each schedule, partial and several tiles per request.
    {DType::kBF16, 64, 128, 1, Lens::kVariable, true, true, 0, 0, -1, true, true, true},
    {DType::kFP16, 32, 64, 2, Lens::kSkewed, false, true, 1, 0, -1, true, true, true},
    {DType::kBF16, 128, 40, 3, Lens::kFixed, true, false, 2, 0, -1, true, true, true},
    {DType::kBF16, 64, 16, 4, Lens::kVariable, true, true, 0, 0, -1, true, true, true},
    {DType::kBF16, 64, 128, 1, Lens::kFixed, false, true, 2, 1, 4001, true, true, true},
    {DType::kFP16, 128, 128, 8, Lens::kVariable, true, true, 1, 0, 300, true, true, true},
    // The in-step wide tile (e4m3 q, tactics 19-21): the same shapes, and odd block counts
    // (a chunk's pairs with one block).
    {DType::kBF16, 64, 128, 1, Lens::kVariable, true, true, 19, 0, -1, true, true, true},
    {DType::kFP16, 32, 64, 2, Lens::kSkewed, false, true, 20, 0, -1, true, true, true},
    {DType::kBF16, 128, 40, 3, Lens::kFixed, true, false, 21, 0, -1, true, true, true},
    {DType::kBF16, 64, 16, 4, Lens::kVariable, true, true, 19, 0, -1, true, true, true},
    {DType::kBF16, 64, 128, 1, Lens::kFixed, false, true, 21, 1, 4001, true, true, true},
    {DType::kFP16, 128, 128, 8, Lens::kVariable, true, true, 20, 0, 300, true, true, true},
    {DType::kBF16, 64, 64, 1, Lens::kFixed, true, true, 19, 3, 130, true, true, true},
    {DType::kBF16, 32, 128, 2, Lens::kSkewed, true, true, 21, 0, -1, true, true, true},
    // The wide tile with a 16-bit q (the cache widened in shared memory): the same shapes.
    {DType::kBF16, 64, 128, 1, Lens::kVariable, true, true, 0, 0, -1, true, true, false},
    {DType::kFP16, 32, 64, 2, Lens::kSkewed, false, true, 1, 0, -1, true, true, false},
    {DType::kBF16, 128, 40, 3, Lens::kFixed, true, false, 2, 0, -1, true, true, false},
    {DType::kBF16, 64, 16, 4, Lens::kVariable, true, true, 0, 0, -1, true, true, false},
    {DType::kBF16, 64, 128, 1, Lens::kFixed, false, true, 2, 1, 4001, true, true, false},
    {DType::kFP16, 128, 128, 8, Lens::kVariable, true, true, 1, 0, 300, true, true, false},
    // The wide tile with a bf16 q split into two e4m3 parts (Widen::kQSplit, tactics 14, 15):
    // the same shapes, h_q 128 s_q 8 partial tiles past 512 rows.
    {DType::kBF16, 64, 128, 1, Lens::kVariable, true, true, 14, 0, -1, true, true, false},
    {DType::kBF16, 32, 64, 2, Lens::kSkewed, false, true, 15, 0, -1, true, true, false},
    {DType::kBF16, 128, 40, 3, Lens::kFixed, true, false, 14, 0, -1, true, true, false},
    {DType::kBF16, 64, 16, 4, Lens::kVariable, true, true, 15, 0, -1, true, true, false},
    {DType::kBF16, 64, 128, 1, Lens::kFixed, false, true, 14, 1, 4001, true, true, false},
    {DType::kBF16, 128, 128, 8, Lens::kVariable, true, true, 15, 0, 300, true, true, false},
    {DType::kBF16, 64, 100, 5, Lens::kSkewed, true, true, 14, 0, -1, true, true, false},
    // The same split made by the consumers of the narrow tile (tactics 16-18, tiles of 16 rows):
    // each schedule and page size, partial tiles and several a request, split requests.
    {DType::kBF16, 64, 16, 1, Lens::kVariable, true, true, 16, 0, -1, true, true, false},
    {DType::kBF16, 32, 16, 2, Lens::kSkewed, false, true, 17, 0, -1, true, true, false},
    {DType::kBF16, 128, 16, 1, Lens::kFixed, true, false, 18, 0, -1, true, true, false},
    {DType::kBF16, 64, 1, 8, Lens::kVariable, true, true, 16, 0, -1, true, true, false},
    {DType::kBF16, 128, 3, 5, Lens::kSkewed, false, true, 18, 0, -1, true, true, false},
    {DType::kBF16, 64, 8, 4, Lens::kFixed, true, true, 17, 2, 130, true, true, false},
    {DType::kBF16, 32, 64, 1, Lens::kVariable, true, true, 16, 0, -1, true, true, false},
    {DType::kBF16, 64, 16, 1, Lens::kFixed, true, true, 16, 1, 4001, true, true, false},
    {DType::kBF16, 64, 16, 1, Lens::kFixed, false, true, 17, 1, 4001, true, true, false},
    {DType::kBF16, 64, 40, 3, Lens::kVariable, true, true, 18, 0, -1, true, true, false},
};

TEST(Sm90Fp8, Sweep) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_cases(kSweep, 4100, kBackend);
}

// The common edges (long single requests, lengths below s_q, non-causal, all empty, 1100
// requests, odd head counts) with sm90's page sizes, an e4m3 cache, 16-bit and e4m3 q, every
// tactic; and lengths at a 64-token block boundary.
TEST(Sm90Fp8, Edges) {
  MLAKIT_SKIP_WITHOUT_SM90();
  std::vector<Case> edges = common_edges();
  // {dtype, page size, h_q, s_q, lengths, sinks, lse, tactic (set below), batch, len}
  const Case more[] = {
      {DType::kBF16, 64, 16, 1, Lens::kFixed, false, true, 0, 0, 64},
      {DType::kBF16, 64, 128, 2, Lens::kFixed, true, true, 0, 0, 65},
      {DType::kFP16, 32, 32, 4, Lens::kFixed, false, true, 0, 0, 63},
  };
  edges.insert(edges.end(), std::begin(more), std::end(more));
  for (Case& c : edges) c.page_size = c.page_size == 1 ? 128 : std::max(c.page_size, 32);
  check_each_tactic(with_fp8(std::move(edges)), 4200, kBackend);
}

// s_q 9..16 with an e4m3 cache, bf16 q and e4m3 q, every tactic.
TEST(Sm90Fp8, LongMtp) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_each_tactic(with_fp8(long_mtp_cases()), 4250, kBackend);
}

// The error of the e4m3 products on the data (q and the cache N(0, 1/4) before
// quantization), over lengths and head counts; the contract is a relative L2 error below 3e-2.
TEST(Sm90Fp8, ErrorOfFp8Products) {
  MLAKIT_SKIP_WITHOUT_SM90();
  uint64_t seed = 4300;
  for (const int h_q : {16, 128}) {
    for (const int len : {64, 1024, 8192}) {
      const Case c{.h_q = h_q,
                   .lens = Lens::kFixed,
                   .lse = true,
                   .tactic = 3,
                   .batch = 2,
                   .len = len,
                   .fp8_kv = true,
                   .fp8_q = true};
      harness::Comparison cmp;
      MLAKIT_ASSERT_OK(compare_case(c, seed++, kBackend, 0.5f, &cmp));
      EXPECT_LT(cmp.rel_l2_err, 3e-2) << case_name(c);
      EXPECT_TRUE(cmp.passes(harness::default_tolerance(case_problem(c, {len, len}))))
          << cmp.summary();
      std::printf("  N(0,1/4) h_q %3d L %5d: %s\n", h_q, len, cmp.summary().c_str());
    }
  }
}

// A bf16 q split into two e4m3 parts (tactic 14 on the wide tile at h_q 64 and 128, 16 on the
// narrow tile at h_q 16) against the cache widened to bf16 (tactic 0, or the narrow tile's 3) on
// the data: both within the 16-bit tolerance; the split's output error at most a little
// above the widening tile's (P in two e4m3 parts keeps about 2^-8 of each value, bf16 2^-9), its
// LSE error that of fp8 products (below 2e-3, the 16-bit tolerance).
TEST(Sm90Fp8, ErrorOfSplitQ) {
  MLAKIT_SKIP_WITHOUT_SM90();
  uint64_t seed = 4350;
  for (const int h_q : {16, 64, 128}) {
    const int split = h_q == 16 ? sm90::kQSplitNarrowTactic : sm90::kQSplitTactic;
    const int widen = h_q == 16 ? sm90::kNarrowTactic : 0;
    for (const int len : {64, 1024, 8192}) {
      double rel[2] = {0, 0};
      for (const int tactic : {split, widen}) {
        const Case c{.h_q = h_q,
                     .lens = Lens::kFixed,
                     .lse = true,
                     .tactic = tactic,
                     .batch = 2,
                     .len = len,
                     .fp8_kv = true,
                     .fp8_q = false};
        harness::Comparison cmp;
        MLAKIT_ASSERT_OK(compare_case(c, seed, kBackend, 0.5f, &cmp));
        EXPECT_TRUE(cmp.passes(harness::default_tolerance(case_problem(c, {len, len}))))
            << case_name(c) << cmp.summary();
        rel[tactic == widen ? 1 : 0] = cmp.rel_l2_err;
        // The split's LSE: 5.7e-6 to 3.2e-5 here on an H200 (the high parts' products before the
        // residuals' were up to 9.3e-5, 2026-11-29-h200-fp8-qsplit call 8).
        if (tactic == split) EXPECT_LT(cmp.lse_max_abs_err, 6e-5) << case_name(c);
        std::printf("  N(0,1/4) h_q %3d L %5d tactic %2d: %s\n", h_q, len, tactic,
                    cmp.summary().c_str());
      }
      EXPECT_LE(rel[0], 1.5 * rel[1] + 1e-4) << "h_q " << h_q << " L " << len;
      ++seed;
    }
  }
}

// One decoder run again and again on the same inputs gives the same bits (every tactic of both q
// kinds at 32 rows, batch 8, L 4096), the first run within the tolerance.
TEST(Sm90Fp8, RepeatedRunsBitwiseEqual) {
  MLAKIT_SKIP_WITHOUT_SM90();
  for (const bool fp8_q : {false, true}) {
    Case c{.h_q = 32,
           .s_q = 1,
           .lens = Lens::kFixed,
           .batch = 8,
           .len = 4096,
           .fp8_kv = true,
           .fp8_q = fp8_q};
    const std::vector<int32_t> lens = case_lengths(c, 4500);
    const Problem p = case_problem(c, lens);
    const harness::HostInputs in = harness::make_inputs(p, lens, {.seed = 4500});
    Output ref;
    MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
    harness::DeviceInputs device;
    MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
    for (const int tactic : tactic_ids(kBackend, p)) {
      std::unique_ptr<Decoder> decoder;
      MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = kBackend, .tactic = tactic}, &decoder));
      harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
      StreamHolder s;
      Output first;
      int differing = 0;
      for (int run = 0; run < 12; ++run) {
        Output got;
        MLAKIT_ASSERT_OK(run_device(*decoder, in, device, workspace.get(), s.stream, &got));
        if (run == 0) {
          EXPECT_TRUE(matches_reference(in, got, ref)) << "tactic " << tactic;
          first = got;
        } else if (got.out != first.out) {
          if (differing++ == 0) {
            // Where the first differing run differs: by output-dim tile (64 dims) and by row
            // within a 16-row tile, and by request.
            int by_dim[8] = {}, by_row[16] = {}, by_req[64] = {};
            for (size_t e = 0; e < got.out.size(); ++e) {
              if (got.out[e] == first.out[e]) continue;
              const size_t row = e / 512;
              ++by_dim[(e % 512) / 64];
              ++by_row[row % 16];
              ++by_req[std::min<size_t>(row / (p.h_q * p.s_q), 63)];
            }
            std::printf("  tactic %d run %d differs: by dim tile", tactic, run);
            for (int v : by_dim) std::printf(" %d", v);
            std::printf("; by row");
            for (int v : by_row) std::printf(" %d", v);
            std::printf("; by request");
            for (int i = 0; i < 8; ++i) std::printf(" %d", by_req[i]);
            std::printf("\n");
          }
        }
      }
      EXPECT_EQ(differing, 0) << (fp8_q ? "e4m3" : "bf16") << " q, tactic " << tactic;
      std::printf("  %s q tactic %2d: %d of 11 runs differ from the first\n",
                  fp8_q ? "e4m3" : "bf16", tactic, differing);
    }
  }
}

// The bench's path for correctness: graph replays of back-to-back launches over input copies that
// keep the L2 cold (harness::time_gpu, its times unused), settled as bench settles, then every
// copy's output against the reference. Both q kinds, the narrow tiles' tactics, 64 rows (h_q 32,
// s_q 2) at batch 8, where bench's checks caught the narrow split's early stage release
// (2026-11-29); this test did not reproduce that timing-dependent failure in one run against a
// build with the early release (bench/results/2026-11-29-h200-fp8-qsplit-narrow, call 8): a check
// of the replay path.
TEST(Sm90Fp8Graph, ColdReplaysMatchTheReference) {
  MLAKIT_SKIP_WITHOUT_SM90();
  const DeviceInfo dev = current_device();
  for (const bool fp8_q : {false, true}) {
    const Case c{.h_q = 32,
                 .s_q = 2,
                 .lens = Lens::kFixed,
                 .batch = 8,
                 .len = 4096,
                 .fp8_kv = true,
                 .fp8_q = fp8_q};
    const std::vector<int32_t> lens = case_lengths(c, 4600);
    Problem p = case_problem(c, lens);
    p.enable_pdl = true;
    const harness::HostInputs in = harness::make_inputs(p, lens, {.seed = 4600});
    Output ref;
    MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
    std::vector<harness::DeviceInputs> copies;
    MLAKIT_ASSERT_OK(
        harness::upload_cold_copies(in, dev.l2_bytes, dev.global_mem_bytes / 8, &copies));
    for (const int tactic : tactic_ids(kBackend, p)) {
      if (tactic < sm90::kNarrowTactic || tactic == sm90::kQSplitTactic ||
          tactic == sm90::kQSplitTactic + 1) {
        continue;  // the wide tiles
      }
      SCOPED_TRACE(::testing::Message() << (fp8_q ? "e4m3" : "bf16") << " q, tactic " << tactic);
      std::unique_ptr<Decoder> decoder;
      MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = kBackend, .tactic = tactic}, &decoder));
      for (const harness::DeviceInputs& d : copies) MLAKIT_ASSERT_OK(d.poison(in));
      harness::Timing unused;
      MLAKIT_ASSERT_OK(harness::time_gpu(*decoder, copies,
                                         {.warmup = 3, .replays = 10, .settle_ms = 100}, &unused));
      for (const harness::DeviceInputs& d : copies) {
        Output got;
        got.out.assign(in.out_bytes() / 2, 0);
        got.lse.assign(p.return_lse ? in.lse_count() : 0, 0.0f);
        MLAKIT_ASSERT_OK(d.download(in, got.out.data(), p.return_lse ? got.lse.data() : nullptr));
        EXPECT_TRUE(matches_reference(in, got, ref));
      }
    }
  }
}

TEST(Sm90Fp8Graph, ScalesAndLengthsFollowedByReplays) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_graph_replay(kBackend, 32, {.q = DType::kBF16, .kv = DType::kFP8E4M3});
  check_graph_replay(kBackend, 64, {.q = DType::kFP8E4M3, .kv = DType::kFP8E4M3});
}

TEST(Sm90Fp8Pdl, BitwiseEqualWithAndWithout) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_pdl_bitwise(kBackend, 64, {.q = DType::kFP8E4M3, .kv = DType::kFP8E4M3});
  check_pdl_bitwise(kBackend, 128, {.q = DType::kFP16, .kv = DType::kFP8E4M3, .out = DType::kFP16});
  check_pdl_bitwise(kBackend, 64, {.q = DType::kBF16, .kv = DType::kFP8E4M3});  // q split, 14, 15
}

// For scripts/sanitize.sh: both q kinds, 16 and 32 rows, each schedule, split and unsplit
// requests, the stages reused within a chunk.
TEST(Sm90Sanitize, Fp8) {
  MLAKIT_SKIP_WITHOUT_SM90();
  const Case small[] = {
      {DType::kBF16, 32, 16, 2, Lens::kVariable, true, true, 3, 0, 100, true, true, false},
      {DType::kFP16, 64, 8, 3, Lens::kSkewed, false, true, 4, 0, 12, true, true, true},
      {DType::kBF16, 128, 32, 1, Lens::kFixed, true, true, 5, 2, 300, true, true, true},
      {DType::kBF16, 64, 16, 1, Lens::kFixed, false, false, 3, 8, 600, true, true, false},
      {DType::kBF16, 64, 64, 1, Lens::kVariable, true, true, 5, 0, 300, true, true, false},
      // The wide tile, each schedule; its stages reused within a chunk.
      {DType::kBF16, 64, 64, 2, Lens::kSkewed, true, true, 0, 0, 12, true, true, true},
      {DType::kFP16, 32, 128, 1, Lens::kVariable, false, true, 1, 0, 100, true, true, true},
      {DType::kBF16, 128, 64, 1, Lens::kFixed, true, true, 2, 2, 300, true, true, true},
      {DType::kBF16, 64, 64, 1, Lens::kFixed, false, false, 0, 8, 600, true, true, true},
      // The in-step wide tile, each schedule; odd block counts (a pair with one block).
      {DType::kBF16, 64, 64, 2, Lens::kSkewed, true, true, 19, 0, 12, true, true, true},
      {DType::kFP16, 32, 128, 1, Lens::kVariable, false, true, 20, 0, 100, true, true, true},
      {DType::kBF16, 128, 64, 1, Lens::kFixed, true, true, 21, 2, 300, true, true, true},
      {DType::kBF16, 64, 64, 1, Lens::kFixed, false, false, 19, 8, 600, true, true, true},
      // The wide tile with a 16-bit q: its widening in place, each schedule.
      {DType::kBF16, 64, 64, 2, Lens::kSkewed, true, true, 0, 0, 12, true, true, false},
      {DType::kFP16, 32, 128, 1, Lens::kVariable, false, true, 2, 2, 300, true, true, false},
      // q split into two e4m3 parts, each schedule; the residual of P through its one buffer.
      {DType::kBF16, 64, 64, 2, Lens::kSkewed, true, true, 14, 0, 12, true, true, false},
      {DType::kBF16, 32, 128, 1, Lens::kVariable, false, true, 15, 2, 300, true, true, false},
      {DType::kBF16, 64, 64, 1, Lens::kFixed, false, false, 14, 8, 600, true, true, false},
      // The split by the narrow tile's consumers, each schedule; Q split again per chunk (the
      // persistent parts of 128 variable requests hold blocks of several requests).
      {DType::kBF16, 64, 16, 1, Lens::kVariable, true, true, 16, 128, 1000, true, true, false},
      {DType::kBF16, 64, 16, 2, Lens::kSkewed, true, true, 16, 0, 12, true, true, false},
      {DType::kBF16, 32, 8, 3, Lens::kVariable, false, true, 17, 2, 300, true, true, false},
      {DType::kBF16, 128, 16, 1, Lens::kFixed, true, true, 18, 2, 300, true, true, false},
      {DType::kBF16, 64, 16, 1, Lens::kFixed, false, false, 16, 8, 600, true, true, false},
  };
  check_cases(small, 4400, kBackend);
}

}  // namespace
}  // namespace mlakit::testing
