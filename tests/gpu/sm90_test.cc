// GPU tests of the sm90 backend (Hopper, wgmma/TMA) against the cpu reference, on sm_90 devices
// only (each test skips itself elsewhere).
//
// Same inputs, poisoning and tolerance as sm80_test.cc (see there): every element is compared
// with harness::default_tolerance. What sm90 claims to run, and so what is covered here: bf16 or
// fp16 (q, kv and out alike), page sizes 32, 64 and 128, h_q 1..128, s_q 1..16 causal or not,
// variable lengths including 0, sinks, lse, tactics 0 (persistent), 1 (one-shot) and 2 (cluster:
// the CTAs of a request merge through distributed shared memory, no combine kernel), and the same
// three with the narrow tile (3, 4, 5; h_q x s_q <= 32, tiles of 16 or 32 rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <vector>

#include "backends/sm90/launch.h"
#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

constexpr const char* kBackend = "sm90";

// Every pair of values of (dtype, page size, h_q, s_q, lengths, sinks, lse, tactic) appears in
// at least one case: one case per h_q x s_q (the largest pair product, 5 x 4), the other factors
// assigned by a pairwise covering search, balanced within one case per value.
const Case kSweep[] = {
    {DType::kBF16, 32, 1, 2, Lens::kSkewed, false, true, 1},
    {DType::kBF16, 32, 1, 8, Lens::kSkewed, true, false, 0},
    {DType::kFP16, 32, 16, 8, Lens::kVariable, false, false, 1},
    {DType::kFP16, 32, 32, 4, Lens::kFixed, true, true, 1},
    {DType::kBF16, 32, 64, 1, Lens::kSkewed, false, false, 0},
    {DType::kFP16, 32, 64, 8, Lens::kFixed, true, true, 0},
    {DType::kBF16, 32, 128, 2, Lens::kVariable, false, false, 0},
    {DType::kBF16, 64, 1, 1, Lens::kFixed, true, false, 0},
    {DType::kFP16, 64, 16, 1, Lens::kSkewed, false, false, 1},
    {DType::kBF16, 64, 16, 2, Lens::kFixed, true, false, 1},
    {DType::kFP16, 64, 32, 2, Lens::kVariable, true, true, 1},
    {DType::kBF16, 64, 64, 4, Lens::kVariable, false, true, 0},
    {DType::kBF16, 64, 128, 8, Lens::kFixed, true, true, 1},
    {DType::kFP16, 128, 1, 4, Lens::kVariable, true, false, 0},
    {DType::kFP16, 128, 16, 4, Lens::kFixed, false, true, 0},
    {DType::kFP16, 128, 32, 1, Lens::kFixed, false, true, 1},
    {DType::kBF16, 128, 32, 8, Lens::kSkewed, false, false, 0},
    {DType::kFP16, 128, 64, 2, Lens::kSkewed, true, true, 1},
    {DType::kFP16, 128, 128, 1, Lens::kVariable, true, true, 1},
    {DType::kBF16, 128, 128, 4, Lens::kSkewed, false, false, 0},
};

TEST(Sm90, Sweep) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_cases(kSweep, 100, kBackend);
}

// The sweep again under the cluster schedule (tactic 2): every case's batch decides the cluster
// size (up to 8 CTAs per request and tile for small batches, fewer for large ones, one for the
// largest).
TEST(Sm90, ClusterSweep) {
  MLAKIT_SKIP_WITHOUT_SM90();
  std::vector<Case> cases(std::begin(kSweep), std::end(kSweep));
  for (Case& c : cases) c.tactic = 2;
  // Larger batches: fewer CTAs per request (down to one, written directly).
  // {dtype, page size, h_q, s_q, lengths, sinks, lse, tactic, batch}
  const Case larger[] = {
      {DType::kBF16, 64, 128, 1, Lens::kVariable, true, true, 2, 20},
      {DType::kFP16, 32, 128, 1, Lens::kFixed, false, true, 2, 30},
      {DType::kBF16, 128, 64, 2, Lens::kSkewed, true, false, 2, 100},
  };
  cases.insert(cases.end(), std::begin(larger), std::end(larger));
  check_cases(cases, 300, kBackend);
}

// The narrow tile (tactics 3, 4, 5): both tile sizes (up to 16 rows and 17..32), partial tiles,
// causal MTP, every page size, dtype, length kind, sinks and lse; each case under all three
// schedules. The first batch-1 and long cases split a request across many CTAs.
TEST(Sm90, NarrowSweep) {
  MLAKIT_SKIP_WITHOUT_SM90();
  // {dtype, page size, h_q, s_q, lengths, sinks, lse, tactic (set below), batch, len}
  const Case narrow[] = {
      {DType::kBF16, 64, 16, 1, Lens::kFixed, true, true, 0, 1, 4001},
      {DType::kBF16, 64, 16, 1, Lens::kVariable, false, true},
      {DType::kFP16, 32, 16, 2, Lens::kSkewed, true, false},
      {DType::kBF16, 128, 32, 1, Lens::kFixed, false, true, 0, 3, 700},
      {DType::kFP16, 64, 1, 8, Lens::kVariable, true, true},
      {DType::kBF16, 32, 3, 5, Lens::kSkewed, false, true},
      {DType::kBF16, 128, 10, 3, Lens::kVariable, true, false},
      {DType::kFP16, 128, 8, 4, Lens::kFixed, true, true, 0, 2, 130},
      {DType::kBF16, 64, 1, 1, Lens::kFixed, false, false, 0, 4, 63},
      {DType::kFP16, 32, 32, 1, Lens::kSkewed, false, true, 0, 0, 40},
  };
  uint64_t seed = 1200;
  for (Case c : narrow) {
    for (const int tactic : {3, 4, 5}) {
      c.tactic = tactic;
      SCOPED_TRACE(case_name(c));
      check_case(c, seed++, kBackend);
    }
  }
}

// Tactic 2 (or 5, narrow) with C clusters of S CTAs per (request, tile) forced (the host picks the
// shape from the batch and the device's occupancy, so the sweeps above reach only some).
void check_cluster_shape(const Case& c, sm90::ClusterShape shape, uint64_t seed) {
  const std::vector<int32_t> lens = case_lengths(c, seed);
  const Problem p = case_problem(c, lens);
  const harness::HostInputs in = harness::make_inputs(p, lens, {.seed = seed});
  Output ref;
  MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
  sm90::Setup setup;
  MLAKIT_ASSERT_OK(sm90::make_setup(p, c.tactic, current_device(), &setup));
  ASSERT_LE(int64_t{shape.clusters} * in.batch,
            std::max<int64_t>(setup.layout.max_slots, 1));  // the workspace holds the partials
  setup.forced_cluster_shape = shape;
  harness::DeviceInputs device;
  MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
  harness::DeviceBuffer workspace(std::max<size_t>(setup.layout.bytes, 256));
  cudaStream_t stream = nullptr;
  MLAKIT_ASSERT_CUDA(cudaStreamCreate(&stream));
  Output got;
  const Status ran =
      run_device([&](cudaStream_t s) { return sm90::run(setup, device.args, workspace.get(), s); },
                 in, device, stream, &got);
  cudaStreamDestroy(stream);
  MLAKIT_ASSERT_OK(ran);
  const ::testing::AssertionResult result = matches_reference(in, got, ref);
  EXPECT_TRUE(result) << case_name(c) << " C " << shape.clusters << " S " << shape.size;
  std::printf("  %-56s C %d S %d %s\n", case_name(c).c_str(), shape.clusters, shape.size,
              result.message());
}

// Every cluster size 1..8 (3, 5, 6 and 7 do not divide the 64 rows of a tile), one cluster per
// (request, tile) (merged into the output) and three (merged into partials for the combine
// kernel): partial query tiles (120 rows), variable lengths with requests shorter than C S
// blocks, empty requests, sinks.
TEST(Sm90, ClusterShapes) {
  MLAKIT_SKIP_WITHOUT_SM90();
  // {dtype, page size, h_q, s_q, lengths, sinks, lse, tactic, batch, len}
  const Case cases[] = {
      {DType::kBF16, 64, 40, 3, Lens::kVariable, true, true, 2, 6, 700},
      {DType::kFP16, 32, 128, 1, Lens::kSkewed, false, true, 2, 5, 30},
      {DType::kBF16, 128, 16, 2, Lens::kFixed, true, true, 2, 2, 600},
      // The narrow tile: 16 rows (12 used) and 32 (20 used).
      {DType::kBF16, 64, 12, 1, Lens::kVariable, true, true, 5, 6, 700},
      {DType::kFP16, 32, 10, 2, Lens::kFixed, true, true, 5, 2, 500},
  };
  uint64_t seed = 800;
  for (const Case& c : cases) {
    for (int32_t size = 1; size <= sm90::kMaxClusterCtas; ++size) {
      for (const int32_t clusters : {1, 3}) {
        SCOPED_TRACE(::testing::Message() << case_name(c) << " C " << clusters << " S " << size);
        check_cluster_shape(c, {.clusters = clusters, .size = size}, seed++);
      }
    }
  }
}

// The common edges with page sizes 1 -> 128 and 16 -> 32 (64 and 32 stay), plus sm90's own tile
// and length edges; each with every tactic.
TEST(Sm90, Edges) {
  MLAKIT_SKIP_WITHOUT_SM90();
  std::vector<Case> edges = common_edges();
  for (Case& c : edges) c.page_size = c.page_size == 1 ? 128 : std::max(c.page_size, 32);
  // {dtype, page size, h_q, s_q, lengths, sinks, lse, tactic (set below), batch, len}
  const Case more[] = {
      // The most query rows: h_q 128 x s_q 8 = 1024 rows, 16 tiles of 64.
      {DType::kBF16, 128, 128, 8, Lens::kVariable, true, true, 0, 0, 300},
      // Lengths at a 64-token boundary (a page of 64, two of 32, half of 128): exactly, one over,
      // one under.
      {DType::kBF16, 64, 16, 1, Lens::kFixed, false, true, 0, 0, 64},
      {DType::kBF16, 64, 128, 2, Lens::kFixed, true, true, 0, 0, 65},
      {DType::kFP16, 32, 32, 4, Lens::kFixed, false, true, 0, 0, 63},
  };
  edges.insert(edges.end(), std::begin(more), std::end(more));
  check_each_tactic(edges, 500, kBackend);
}

// s_q 9..16 under every tactic (the wide and narrow tiles: 32 rows of h_q 2).
TEST(Sm90, LongMtp) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_each_tactic(long_mtp_cases(), 1400, kBackend);
}

// The short sweep that scripts/sanitize.sh runs under compute-sanitizer: page sizes 32, 64 and
// 128, all three tactics, split (skewed: one request 50x the rest) and unsplit requests, s_q 2,
// sinks and lse, the cluster schedule; small enough for racecheck.
TEST(Sm90Sanitize, Small) {
  MLAKIT_SKIP_WITHOUT_SM90();
  // {dtype, page size, h_q, s_q, lengths, sinks, lse, tactic, batch, len}
  const Case small[] = {
      {DType::kBF16, 32, 16, 2, Lens::kVariable, true, true, 0, 0, 100},
      {DType::kFP16, 64, 64, 2, Lens::kSkewed, false, true, 1, 0, 12},
      {DType::kBF16, 128, 128, 2, Lens::kFixed, true, false, 0, 2, 150},
      {DType::kBF16, 32, 8, 2, Lens::kSkewed, true, true, 1, 0, 10},
      {DType::kBF16, 64, 128, 1, Lens::kVariable, true, true, 2, 0, 300},
      {DType::kFP16, 32, 16, 2, Lens::kSkewed, false, true, 2, 0, 40},
      // ~4 blocks per chunk: both stages reused within a chunk.
      {DType::kBF16, 64, 64, 1, Lens::kFixed, false, false, 0, 64, 512},
      // The narrow tile under each schedule, 16 and 32 rows.
      {DType::kBF16, 64, 16, 1, Lens::kSkewed, true, true, 3, 0, 12},
      {DType::kFP16, 32, 8, 3, Lens::kVariable, false, true, 4, 0, 100},
      {DType::kBF16, 128, 16, 2, Lens::kFixed, true, true, 5, 2, 300},
      {DType::kBF16, 64, 16, 1, Lens::kFixed, false, false, 3, 64, 512},
  };
  check_cases(small, 900, kBackend);
}

// Every tactic under the sanitizers (scripts/sanitize.sh), narrow and wide tiles, MTP, sinks.
TEST(Sm90Sanitize, EveryTactic) {
  MLAKIT_SKIP_WITHOUT_SM90();
  const Case cases[] = {
      {DType::kBF16, 32, 16, 2, Lens::kVariable, true, true, 0, 3, 100},
      {DType::kFP16, 64, 128, 1, Lens::kSkewed, false, true, 0, 0, 40},
  };
  check_each_tactic(cases, 960, kBackend);
}

// Cluster shapes under the sanitizers (scripts/sanitize.sh): sizes that do not divide the tile's
// 64 rows, one and several clusters per request.
TEST(Sm90Sanitize, ClusterShapes) {
  MLAKIT_SKIP_WITHOUT_SM90();
  const Case c = {DType::kBF16, 64, 40, 3, Lens::kVariable, true, true, 2, 3, 500};
  check_cluster_shape(c, {.clusters = 1, .size = 3}, 951);
  check_cluster_shape(c, {.clusters = 2, .size = 8}, 952);
  check_cluster_shape(c, {.clusters = 4, .size = 1}, 953);
  const Case narrow = {DType::kBF16, 64, 10, 2, Lens::kVariable, true, true, 5, 3, 500};
  check_cluster_shape(narrow, {.clusters = 1, .size = 3}, 954);
  check_cluster_shape(narrow, {.clusters = 2, .size = 8}, 955);
}

TEST(Sm90, WorkspaceTooSmallIsRefused) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_workspace_too_small_is_refused(kBackend);
}

TEST(Sm90, RefusesWhatItDoesNotSupport) {
  MLAKIT_SKIP_WITHOUT_SM90();
  std::vector<Refusal> refusals = common_refusals();
  for (const int page_size : {16, 1}) {
    Problem p;
    p.max_seq_len = 1024;
    p.page_size = page_size;
    refusals.push_back({p, "page_size"});
  }
  expect_refused(kBackend, refusals);
}

// Off sm_90 (another GPU, or none) the backend is not available: it refuses every problem.
TEST(Sm90, UnavailableOffSm90) {
  const DeviceInfo device = current_device();
  if (device.present && device.sm_major == 9) GTEST_SKIP() << "an sm_90 device";
  Problem p;
  p.max_seq_len = 1024;
  EXPECT_FALSE(can_run(kBackend, p).ok());
  std::unique_ptr<Decoder> decoder;
  EXPECT_FALSE(Decoder::create(p, {.backend = kBackend}, &decoder).ok());
}

}  // namespace
}  // namespace mlakit::testing
