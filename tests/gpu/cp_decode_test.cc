// Issue 38: the GPU backends decode a context-parallel rank's shard (Problem::cp_world > 1): the
// rank's local block table and the GLOBAL lengths, from which a small kernel counts the rank's
// tokens and the causal bounds of MTP tokens (plan/cp_lengths.h). Each rank's result, for every
// tactic, equals the cpu backend's on the same shard (rows without a visible token: out 0, lse
// -inf), and the ranks' GPU partials merged (merge_partials) equal the unsharded cpu decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/check.h"
#include "harness/compare.h"
#include "harness/workload.h"
#include "mlakit/cp.h"
#include "plan/cp_lengths.h"
#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

// plan::Lengths (host-callable; the cp_lengths kernel's arithmetic) counts what cp_local_len
// counts, clamps included.
TEST(CpLengths, CountsTheRanksTokensAndCausalBounds) {
  for (const int world : {2, 3, 4, 64}) {
    for (const int interleave : {1, 5, 64}) {
      for (int rank = 0; rank<world; rank += world> 4 ? 21 : 1) {
        const int32_t max_len = 3 * world * interleave + 11, reach = max_len / 2;
        Problem p;
        p.max_seq_len = max_len;
        p.cp_world = world;
        p.cp_rank = rank;
        p.cp_interleave = interleave;
        const plan::Lengths lens = plan::cp_lengths(p, reach);
        for (int32_t len = -3; len <= max_len + 5; ++len) {
          const int64_t g = std::clamp(len, 0, max_len);
          const int64_t want = std::min<int64_t>(cp_local_len(g, world, rank, interleave), reach);
          ASSERT_EQ(lens.of(len), want) << "len " << len << " N " << world << " r " << rank;
          for (const int back : {0, 1, 3}) {
            const int64_t bound = std::min<int64_t>(
                cp_local_len(std::max<int64_t>(g - back, 0), world, rank, interleave), reach);
            ASSERT_EQ(lens.causal_bound(len, back), bound) << "len " << len << " back " << back;
          }
        }
      }
    }
  }
}

struct CpCase {
  int h_q = 16;
  int s_q = 1;
  int world = 2;
  int interleave = 1;
  int page_size = 64;
  bool fp8_kv = false;
  bool fp8_q = false;
};

// Lengths over the edges: 0, 1, fewer than the ranks, a shard boundary crossed by the MTP tokens,
// not multiples of the interleave, and two long enough to be split (split-KV, cluster merges).
std::vector<int32_t> edge_lens(const CpCase& c, std::mt19937_64& rng) {
  const int round = c.world * c.interleave;
  std::vector<int32_t> lens = {0, 1, c.world - 1, round + c.interleave / 2 + 1, c.interleave + 2};
  lens.push_back(static_cast<int32_t>(rng() % (2 * round + 37)));
  lens.push_back(static_cast<int32_t>(3000 + rng() % 3000));
  lens.push_back(9000);
  return lens;
}

// Every tactic of `backend` on every rank of `c`, and the merge of tactic 0's partials.
void check_backend(const char* backend, const CpCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Problem gp;
  gp.h_q = c.h_q;
  gp.s_q = c.s_q;
  gp.page_size = c.page_size;
  gp.return_lse = true;
  if (c.fp8_kv) gp.kv_dtype = DType::kFP8E4M3;
  if (c.fp8_q) gp.q_dtype = DType::kFP8E4M3;
  const std::vector<int32_t> lens = edge_lens(c, rng);
  gp.max_batch = static_cast<int32_t>(lens.size());
  gp.max_seq_len = *std::max_element(lens.begin(), lens.end());
  SCOPED_TRACE(
      str_cat(backend, ": ", describe(gp), ", cp world ", c.world, " interleave ", c.interleave));
  const harness::HostInputs global = harness::make_inputs(gp, lens, {.seed = seed});
  Output unsharded;
  MLAKIT_ASSERT_OK(cpu_reference(global, &unsharded));

  const size_t out_count = unsharded.out.size(), rows = unsharded.lse.size();
  std::vector<uint16_t> partial_out(out_count * c.world);
  std::vector<float> partial_lse(rows * c.world);
  for (int r = 0; r < c.world; ++r) {
    const harness::HostInputs in = harness::shard_inputs(global, c.world, r, c.interleave);
    const Problem& p = in.problem;
    if (!can_run(backend, p).ok()) GTEST_SKIP() << backend << ": " << can_run(backend, p).message();
    Output ref;
    MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
    harness::DeviceInputs device;
    MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
    const std::vector<int> tactics = tactic_ids(backend, p);
    for (const int tactic : tactics) {
      SCOPED_TRACE(str_cat("rank ", r, " tactic ", tactic));
      std::unique_ptr<Decoder> decoder;
      MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend, .tactic = tactic}, &decoder));
      StreamHolder s;
      harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
      Output got;
      MLAKIT_ASSERT_OK(run_device(*decoder, in, device, workspace.get(), s.stream, &got));
      EXPECT_TRUE(matches_reference(in, got, ref));
      if (tactic == tactics.front()) {
        std::copy(got.out.begin(), got.out.end(), partial_out.begin() + r * out_count);
        std::copy(got.lse.begin(), got.lse.end(), partial_lse.begin() + r * rows);
      }
    }
  }
  Output merged{.out = std::vector<uint16_t>(out_count, 0xffff),
                .lse = std::vector<float>(rows, std::nanf(""))};
  MLAKIT_ASSERT_OK(merge_partials(ops::Device::kCpu, {.world = c.world,
                                                      .batch = global.batch,
                                                      .s_q = gp.s_q,
                                                      .h_q = gp.h_q,
                                                      .dtype = gp.out_dtype,
                                                      .partial_out = partial_out.data(),
                                                      .partial_lse = partial_lse.data(),
                                                      .out = merged.out.data(),
                                                      .lse = merged.lse.data()}));
  EXPECT_TRUE(matches_reference(global, merged, unsharded)) << "the merged GPU partials";
}

TEST(CpDecodeGpu, Sm80ShardsEqualTheCpuBackend) {
  MLAKIT_SKIP_WITHOUT_GPU();
  uint64_t seed = 3800;
  check_backend("sm80", {.h_q = 16, .world = 2, .interleave = 1}, seed++);
  check_backend("sm80", {.h_q = 128, .s_q = 2, .world = 4, .interleave = 64}, seed++);
  check_backend("sm80", {.h_q = 96, .s_q = 3, .world = 3, .interleave = 1}, seed++);
  check_backend("sm80", {.h_q = 16, .s_q = 4, .world = 2, .interleave = 5, .page_size = 16},
                seed++);
  check_backend("sm80", {.h_q = 32, .s_q = 2, .world = 2, .interleave = 64, .fp8_kv = true},
                seed++);
}

TEST(CpDecodeGpu, Sm90ShardsEqualTheCpuBackend) {
  MLAKIT_SKIP_WITHOUT_SM90();
  uint64_t seed = 3900;
  check_backend("sm90", {.h_q = 16, .world = 2, .interleave = 1}, seed++);
  check_backend("sm90", {.h_q = 128, .s_q = 2, .world = 4, .interleave = 64}, seed++);
  check_backend("sm90", {.h_q = 64, .s_q = 4, .world = 3, .interleave = 1}, seed++);
  check_backend("sm90", {.h_q = 96, .world = 3, .interleave = 64, .page_size = 32}, seed++);
  check_backend("sm90", {.h_q = 16, .s_q = 2, .world = 2, .interleave = 5, .fp8_kv = true}, seed++);
  check_backend("sm90",
                {.h_q = 128, .s_q = 2, .world = 2, .interleave = 64, .fp8_kv = true, .fp8_q = true},
                seed++);
  // A bf16 q with the fp8 cache past 32 rows: also q split into two e4m3 parts (tactics 14-18).
  check_backend("sm90", {.h_q = 64, .s_q = 2, .world = 2, .interleave = 64, .fp8_kv = true},
                seed++);
}

}  // namespace
}  // namespace mlakit::testing
