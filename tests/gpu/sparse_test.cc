// GPU tests of sparse top-k decode against the cpu reference. sm90 (plan/compact.h, gather.cuh;
// sm_90 devices only): a bf16/fp16 q over a cache of q's type, the V3.2 blockwise layout (656
// bytes a token) or the V4 one (584; with and without an extra cache, whose page size may differ),
// page sizes 1..576, h_q 1..128 (narrow tiles of 16 and 32 rows, the wide tile,
// several tiles per row), s_q 1..8, top-k from 1 to 16384 with per-request lengths, -1 slots,
// sinks, lse and every tactic; indices out of range skipped (never read); PDL bitwise. sm80 (the
// dense kernels over the compacted slots as pages of one token): caches of q's type, the e4m3
// cache with one scale, and the V3.2 and V4 layouts (widened with their group scales), the same
// features.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "backends/sm90/launch.h"
#include "core/check.h"
#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

constexpr const char* kBackend = "sm90";

struct SparseCase {
  DType q = DType::kBF16;
  bool blockwise = false;  // the V3.2 layout; else a cache of q's type (or e4m3: fp8)
  int page_size = 64;
  int h_q = 16;
  int s_q = 1;
  int topk = 128;
  int batch = 3;
  int len = 1000;  // cached tokens per request (variable: uniform in [len/8, 2 len))
  bool variable = true;
  bool topk_lens = false;
  bool sinks = false;
  bool lse = true;
  bool fp8 = false;  // the dense e4m3 cache with one scale
  bool v4 = false;   // the V4 layout (d_qk 512)
  int extra_topk = 0;
  int extra_page_size = 0;  // 0: page_size
  bool odd_scales = false;  // V3.2: every scale times 1.3 (no longer a power of two)
  bool tails = false;       // indices as a top-k op emits them: -1 tails past short requests
  float k_scale = NAN;      // V3.2 / V4: the cache's extra scale (none by default)
};

std::string name(const SparseCase& c, int tactic) {
  return str_cat(c.blockwise ? "v32"
                 : c.v4      ? "v4"
                 : c.fp8     ? "e4m3"
                             : "dense",
                 " q ", to_string(c.q), " page ", c.page_size, " h_q ", c.h_q, " s_q ", c.s_q,
                 " topk ", c.topk,
                 c.extra_topk > 0 ? str_cat(" extra ", c.extra_topk, " page ", c.extra_page_size)
                                  : std::string(),
                 " b ", c.batch, " L ", c.len, c.topk_lens ? " lens" : "", c.sinks ? " sinks" : "",
                 c.odd_scales ? " odd scales" : "", c.tails ? " tails" : "",
                 std::isnan(c.k_scale) ? std::string() : str_cat(" k_scale ", c.k_scale),
                 " tactic ", tactic);
}

Problem problem_of(const SparseCase& c) {
  Problem p;
  p.h_q = c.h_q;
  p.s_q = c.s_q;
  p.page_size = c.page_size;
  p.max_batch = c.batch;
  p.max_seq_len = static_cast<int32_t>(harness::longest_seq_len(c.len, c.variable));
  p.q_dtype = p.out_dtype = c.q;
  p.kv_dtype = c.blockwise || c.fp8 || c.v4 ? DType::kFP8E4M3 : c.q;
  p.kv_layout = c.blockwise ? KvLayout::kFp8Blockwise : c.v4 ? KvLayout::kFp8V4 : KvLayout::kDense;
  p.d_qk = c.v4 ? kV4Dqk : kDqk;
  p.topk = c.topk;
  p.extra_topk = c.extra_topk;
  p.extra_page_size = c.extra_page_size;
  p.has_sinks = c.sinks;
  p.return_lse = c.lse;
  return p;
}

harness::HostInputs inputs_of(const SparseCase& c, uint64_t seed) {
  const std::vector<int32_t> lens = harness::make_seq_lens(c.batch, c.len, c.variable, seed);
  harness::HostInputs in = harness::make_inputs(
      problem_of(c), lens, {.seed = seed, .sparse_tails = c.tails, .topk_lens = c.topk_lens});
  if (!std::isnan(c.k_scale)) in.k_scale = c.k_scale;
  if (c.odd_scales) {
    // The kernels' exact power-of-two widening must not take these (the reference reads the
    // same bytes).
    for (size_t at = kDv; at + 16 <= in.kv.size(); at += kBlockwiseBytes) {
      for (int g = 0; g < 4; ++g) {
        float scale;
        std::memcpy(&scale, in.kv.data() + at + 4 * g, 4);
        if (std::isfinite(scale)) scale *= 1.3f;
        std::memcpy(in.kv.data() + at + 4 * g, &scale, 4);
      }
    }
  }
  return in;
}

// Indices no reference can take: every -1 slot (and every slot past a request's top-k length)
// replaced by a value out of range or, past the length, a valid slot that must be ignored.
// Replaces a list's -1 slots and the slots past its lengths as corrupted() says.
void corrupt_list(std::vector<int32_t>& indices, const std::vector<int32_t>& lens, int32_t topk,
                  int64_t tokens, const harness::HostInputs& in) {
  const Problem& p = in.problem;
  const int32_t out_of_range[] = {static_cast<int32_t>(tokens), std::numeric_limits<int32_t>::max(),
                                  -2, std::numeric_limits<int32_t>::min(),
                                  static_cast<int32_t>(tokens + 12345)};
  uint32_t n = 0;
  for (int i = 0; i < in.batch; ++i) {
    const int32_t len = lens.empty() ? topk : lens[i];
    for (int t = 0; t < p.s_q; ++t) {
      int32_t* idx = indices.data() + (static_cast<int64_t>(i) * p.s_q + t) * topk;
      for (int32_t k = 0; k < topk; ++k, ++n) {
        if (k >= len) {
          idx[k] = n % 2 == 0 ? static_cast<int32_t>(n % tokens) : out_of_range[n % 5];
        } else if (idx[k] == -1 && n % 3 != 0) {
          idx[k] = out_of_range[n % 5];
        }
      }
    }
  }
}

// Indices no reference can take: every -1 slot (and every slot past a request's top-k length)
// replaced by a value out of range or, past the length, a valid slot that must be ignored; the
// extra cache's alike.
harness::HostInputs corrupted(const harness::HostInputs& in) {
  harness::HostInputs bad = in;
  const Problem& p = in.problem;
  corrupt_list(bad.indices, in.topk_lens, p.topk, in.num_pages * p.page_size, in);
  if (p.has_extra()) {
    corrupt_list(bad.extra_indices, in.extra_topk_lens, p.extra_topk,
                 in.extra_num_pages * p.extra_page_size_or_default(), in);
  }
  return bad;
}

// One case against the cpu reference. forced: sm90's cluster schedule with that shape of C
// clusters of S CTAs (its setup run directly), instead of a Decoder of `backend`.
void check(const SparseCase& c, uint64_t seed, int tactic, bool corrupt = false,
           const char* backend = kBackend, const sm90::ClusterShape* forced = nullptr) {
  SCOPED_TRACE(name(c, tactic));
  const harness::HostInputs in = inputs_of(c, seed);
  Output ref;
  MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
  const harness::HostInputs run_in = corrupt ? corrupted(in) : in;
  harness::DeviceInputs device;
  MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(run_in, &device));
  StreamHolder s;
  Output got;
  if (forced != nullptr) {
    sm90::Setup setup;
    MLAKIT_ASSERT_OK(sm90::make_setup(in.problem, tactic, current_device(), &setup));
    setup.forced_cluster_shape = *forced;
    harness::DeviceBuffer workspace(std::max<size_t>(setup.workspace_bytes, 256));
    MLAKIT_ASSERT_OK(run_device(
        [&](cudaStream_t st) { return sm90::run(setup, device.args, workspace.get(), st); }, run_in,
        device, s.stream, &got));
  } else {
    std::unique_ptr<Decoder> decoder;
    MLAKIT_ASSERT_OK(Decoder::create(in.problem, {.backend = backend, .tactic = tactic}, &decoder));
    harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
    MLAKIT_ASSERT_OK(run_device(*decoder, run_in, device, workspace.get(), s.stream, &got));
  }
  // Scales that are not powers of two: the 16-bit tiles round each dequantized K and V value to
  // q's type before the products (as FlashMLA does), which moved the LSE by up to 2.6e-3 and the
  // outputs by up to 2 ulp past the default tolerance (H200, 2026-11-28); the sparse narrow and
  // mma kernels (tactics 8-11) apply the scales in fp32 and keep the default. (The split
  // kernel's cluster schedule, tactic 12, rounds as tactics 6 and 7 do.)
  harness::Tolerance tolerance = harness::default_tolerance(in.problem);
  const bool fp32_scales = std::string_view(backend) == "sm90" && tactic >= 8 && tactic <= 11;
  if (c.odd_scales && !fp32_scales) {
    tolerance.rtol *= 2.0;
    tolerance.lse_atol = 5e-3;
  }
  const ::testing::AssertionResult result = matches_reference(in, got, ref, tolerance);
  EXPECT_TRUE(result);
  std::printf("  %-70s %s\n", name(c, tactic).c_str(), result.message());
}

void check_each_tactic(const SparseCase& c, uint64_t* seed, bool corrupt = false,
                       const char* backend = kBackend) {
  for (const int tactic : tactic_ids(backend, problem_of(c))) {
    check(c, (*seed)++, tactic, corrupt, backend);
  }
}

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
  };
  uint64_t seed = 7100;
  for (const SparseCase& c : cases) check_each_tactic(c, &seed);
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
          check(c, seed++, sm90::kSplitClusterTactic, corrupt, kBackend, &shape);
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

// Every tactic against the reference on inputs whose first `empty` requests attend nothing: their
// rows give out 0 and lse -inf.
void check_empty_rows(const harness::HostInputs& in, int empty, const char* backend = kBackend) {
  const Problem& p = in.problem;
  Output ref;
  MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
  for (const int tactic : tactic_ids(backend, p)) {
    std::unique_ptr<Decoder> decoder;
    MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend, .tactic = tactic}, &decoder));
    harness::DeviceInputs device;
    MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
    harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
    StreamHolder s;
    Output got;
    MLAKIT_ASSERT_OK(run_device(*decoder, in, device, workspace.get(), s.stream, &got));
    EXPECT_TRUE(matches_reference(in, got, ref)) << "tactic " << tactic;
    const int rows = empty * p.s_q * p.h_q;
    for (int r = 0; r < rows; ++r) {
      EXPECT_EQ(got.lse[r], -INFINITY) << "row " << r << " tactic " << tactic;
    }
    EXPECT_TRUE(std::all_of(got.out.begin(), got.out.begin() + int64_t{rows} * kDv,
                            [](uint16_t v) { return (v & 0x7fff) == 0; }))
        << "tactic " << tactic;
  }
}

// PDL changes nothing: every tactic, bitwise equal with and without.
void check_sparse_pdl_bitwise(const SparseCase& c, uint64_t seed, const char* backend = kBackend) {
  const harness::HostInputs in = inputs_of(c, seed);
  harness::DeviceInputs device;
  MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
  for (const int tactic : tactic_ids(backend, in.problem)) {
    Output outs[2];
    for (const bool pdl : {false, true}) {
      Problem p = in.problem;
      p.enable_pdl = pdl;
      std::unique_ptr<Decoder> decoder;
      MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend, .tactic = tactic}, &decoder));
      harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
      StreamHolder s;
      MLAKIT_ASSERT_OK(run_device(*decoder, in, device, workspace.get(), s.stream, &outs[pdl]));
    }
    EXPECT_TRUE(bitwise_equal(outs[0], outs[1])) << "tactic " << tactic;
  }
}

// Empty rows: every slot -1 or a top-k length of 0 give out 0 and lse -inf.
void check_blockwise_empty_rows(const char* backend) {
  const SparseCase c{
      .blockwise = true, .h_q = 32, .s_q = 2, .topk = 64, .batch = 4, .topk_lens = true};
  harness::HostInputs in = inputs_of(c, 7400);
  std::fill(in.indices.begin(), in.indices.begin() + c.s_q * c.topk, -1);  // request 0
  in.topk_lens[1] = 0;
  check_empty_rows(in, 2, backend);
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

// The V4 layout (d_qk 512, UE8M0 scales after each page's data rows) with and without an extra
// cache: each tile (narrow 16 and 32 rows, wide, several tiles), page sizes that are not powers
// of two (FlashMLA's tests use 2, 53, 61, 64, 69, 256, 576) for either cache, top-k around a block,
// per-request lengths of both lists, sinks, MTP rows, an fp16 q.
// V4: head counts of each tile, s_q 1-3, page sizes (1, odd, a power of two, 576), top-k sizes
// around a block, per-request lengths, sinks, the extra cache on and off with its own page size;
// then out-of-range indices in either list (and past either length), which are skipped.
void check_v4_every_tactic(const char* backend, uint64_t seed) {
  const SparseCase cases[] = {
      {.h_q = 64, .topk = 128, .v4 = true},
      {.h_q = 128,
       .s_q = 2,
       .topk = 512,
       .topk_lens = true,
       .sinks = true,
       .v4 = true,
       .extra_topk = 128},
      {.page_size = 61,
       .h_q = 16,
       .s_q = 3,
       .topk = 64,
       .len = 512,
       .v4 = true,
       .extra_topk = 64,
       .extra_page_size = 69},
      {.page_size = 2,
       .h_q = 64,
       .topk = 576,
       .batch = 2,
       .len = 1024,
       .topk_lens = true,
       .v4 = true,
       .extra_topk = 63,
       .extra_page_size = 576},
      {.q = DType::kFP16,
       .page_size = 53,
       .h_q = 8,
       .s_q = 3,
       .topk = 65,
       .len = 650,
       .sinks = true,
       .v4 = true,
       .extra_topk = 1,
       .extra_page_size = 256},
      {.page_size = 256,
       .h_q = 32,
       .topk = 2048,
       .batch = 2,
       .len = 2046,
       .v4 = true,
       .extra_topk = 2048,
       .extra_page_size = 64},
      {.h_q = 128, .s_q = 1, .topk = 1, .batch = 5, .v4 = true},
      {.h_q = 40,
       .s_q = 2,
       .topk = 300,
       .topk_lens = true,
       .v4 = true,
       .extra_topk = 100,
       .extra_page_size = 16},
      {.q = DType::kFP16,
       .page_size = 16,
       .h_q = 32,
       .topk = 130,
       .v4 = true,
       .extra_topk = 64,
       .k_scale = 0.75f},
      {.q = DType::kFP16, .h_q = 64, .s_q = 2, .topk = 200, .v4 = true, .k_scale = 2.0f},
      // Pages of one token (pitch 1), and of 1000 (pitch 1024) in the extra cache.
      {.page_size = 1,
       .h_q = 16,
       .topk = 64,
       .len = 300,
       .v4 = true,
       .extra_topk = 16,
       .extra_page_size = 1000},
  };
  for (const SparseCase& c : cases) check_each_tactic(c, &seed, false, backend);
  check_each_tactic({.page_size = 61,
                     .h_q = 64,
                     .s_q = 2,
                     .topk = 300,
                     .topk_lens = true,
                     .v4 = true,
                     .extra_topk = 77,
                     .extra_page_size = 2},
                    &seed, /*corrupt=*/true, backend);
}

TEST(Sm90Sparse, V4EveryTacticAgainstReference) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_v4_every_tactic("sm90", 7150);
}

// V4 rows with nothing to attend in either list (all -1, or both lengths 0) give out 0 and lse
// -inf; a row whose main list is empty attends its extra list alone.
void check_v4_empty_rows(const char* backend) {
  const SparseCase c{
      .h_q = 64, .s_q = 2, .topk = 64, .batch = 4, .topk_lens = true, .v4 = true, .extra_topk = 64};
  harness::HostInputs in = inputs_of(c, 7450);
  std::fill(in.indices.begin(), in.indices.begin() + c.s_q * c.topk, -1);  // request 0
  std::fill(in.extra_indices.begin(), in.extra_indices.begin() + c.s_q * c.extra_topk, -1);
  in.topk_lens[1] = 0;
  in.extra_topk_lens[1] = 0;
  in.topk_lens[2] = 0;  // request 2: the extra list only
  check_empty_rows(in, 2, backend);
}

TEST(Sm90Sparse, V4EmptyRows) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_v4_empty_rows("sm90");
}

// V4 with an extra cache: PDL changes nothing, every tactic.
void check_v4_pdl_bitwise(const char* backend) {
  check_sparse_pdl_bitwise({.page_size = 64,
                            .h_q = 128,
                            .s_q = 2,
                            .topk = 512,
                            .batch = 3,
                            .topk_lens = true,
                            .sinks = true,
                            .v4 = true,
                            .extra_topk = 128,
                            .extra_page_size = 2},
                           7550, backend);
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
  EXPECT_NE(can_run(kBackend, p).message().find("q_dtype"), std::string::npos);
  p = problem_of({});
  p.kv_dtype = DType::kFP8E4M3;
  EXPECT_NE(can_run(kBackend, p).message().find("kv_dtype"), std::string::npos);
  p = problem_of({.blockwise = true});
  p.out_dtype = DType::kFP16;
  EXPECT_NE(can_run(kBackend, p).message().find("out_dtype"), std::string::npos);
  EXPECT_TRUE(can_run(kBackend, problem_of({.blockwise = true, .page_size = 1})).ok());
  // An extra cache only with the V4 layout.
  p = problem_of({.blockwise = true, .extra_topk = 64});
  EXPECT_NE(can_run(kBackend, p).message().find("extra"), std::string::npos);
  EXPECT_TRUE(can_run(kBackend, problem_of({.v4 = true, .extra_topk = 64})).ok());
}

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
  check_each_tactic({.blockwise = true, .h_q = 64, .topk = 300, .topk_lens = true}, &seed, true,
                    "sm80");
  check_each_tactic({.blockwise = true, .h_q = 16, .s_q = 2, .topk = 100, .batch = 3}, &seed, true,
                    "sm80");
}

// A V4 case with an extra cache of another page size, for the sanitizers (both backends).
constexpr SparseCase kV4SanitizeCase{.page_size = 61,
                                     .h_q = 16,
                                     .topk = 100,
                                     .batch = 2,
                                     .len = 300,
                                     .topk_lens = true,
                                     .v4 = true,
                                     .extra_topk = 70,
                                     .extra_page_size = 2};

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
