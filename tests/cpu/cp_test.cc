// Context parallel decode on the cpu backend (issue 38, docs/context-parallel.md): the sharding
// arithmetic; each rank decoding its shard of a global cache (sharded as a server would, by
// harness::shard_inputs) and merge_partials combining the partials equal the unsharded decode;
// empty shards; sinks applied by the merge; the validation of the cp fields and of the merge.
#include "mlakit/cp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/attention.h"
#include "core/backend.h"
#include "cpu_run.h"
#include "harness/compare.h"
#include "harness/workload.h"
#include "status_match.h"

namespace mlakit_test {
namespace {

using mlakit::MergeArgs;
using mlakit::ops::Device;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------------------------
// The arithmetic
// ---------------------------------------------------------------------------------------------

TEST(CpArithmetic, PositionsMapOneToOneAndLocalLengthsCountThem) {
  for (const int world : {1, 2, 3, 4, 7, 64}) {
    for (const int interleave : {1, 3, 64}) {
      const int64_t limit = 3LL * world * interleave + 5;
      std::vector<int64_t> count(world, 0);
      for (int64_t len = 0; len <= limit; ++len) {
        // count[r]: the positions < len on rank r, built one position at a time.
        for (int r = 0; r < world; ++r) {
          ASSERT_EQ(mlakit::cp_local_len(len, world, r, interleave), count[r])
              << "len " << len << " world " << world << " rank " << r << " I " << interleave;
        }
        ASSERT_LE(mlakit::cp_local_len(len, world, world - 1, interleave),
                  mlakit::cp_local_len(len, world, 0, interleave));
        const int64_t g = len;  // the next position
        const int r = mlakit::cp_rank_of(g, world, interleave);
        ASSERT_EQ(r, g / interleave % world);
        const int64_t j = mlakit::cp_local_position(g, world, interleave);
        ASSERT_EQ(j, count[r]) << "local positions keep the global order, without gaps";
        ASSERT_EQ(mlakit::cp_global_position(j, world, r, interleave), g);
        ++count[r];
      }
    }
  }
}

TEST(CpArithmetic, ScratchIsSizedForTheLocalLength) {
  Problem p;
  p.max_seq_len = 1000;
  p.cp_world = 4;
  p.cp_interleave = 64;
  p.return_lse = true;
  // 1000 = 3 rounds of 256 + 232: rank 0 holds 3 * 64 + 64, rank 3 3 * 64 + 40.
  const int64_t expected[] = {256, 256, 256, 232};
  for (int r = 0; r < 4; ++r) {
    p.cp_rank = r;
    EXPECT_EQ(mlakit::cp_local_max_seq_len(p), expected[r]);
    Problem local = p;
    local.cp_world = 1;
    local.cp_rank = 0;
    local.max_seq_len = static_cast<int32_t>(expected[r]);
    EXPECT_EQ(mlakit::cpu::scratch_bytes(p), mlakit::cpu::scratch_bytes(local));
  }
}

// ---------------------------------------------------------------------------------------------
// Sharded decode + merge == unsharded decode
// ---------------------------------------------------------------------------------------------

struct CpCase {
  Problem problem;  // global, cp fields unset
  int world, interleave;
  std::vector<int32_t> lens;
};

std::string describe(const CpCase& c) {
  std::string s = mlakit::describe(c.problem) + ", world " + std::to_string(c.world) +
                  ", interleave " + std::to_string(c.interleave) + ", lens";
  for (const int32_t l : c.lens) s += " " + std::to_string(l);
  return s;
}

// The global visible length of token t of a request of global length len.
int64_t visible(const Problem& p, int64_t len, int t) {
  if (p.s_q == 1 || !p.causal) return len;
  return std::clamp<int64_t>(len - p.s_q + 1 + t, 0, len);
}

// Runs the case unsharded and sharded; returns the merged output's comparison with the
// unsharded one, after checking every rank's empty rows are the neutral state.
void expect_sharded_equals_unsharded(const CpCase& c, uint64_t seed) {
  SCOPED_TRACE(describe(c));
  Problem gp = c.problem;
  gp.return_lse = true;
  gp.max_seq_len = *std::max_element(c.lens.begin(), c.lens.end());
  const HostInputs global = mlakit::harness::make_inputs(gp, c.lens, {.seed = seed});
  const CpuRun ref = run_cpu(global);
  ASSERT_TRUE(ref.status.ok()) << ref.status.to_string();

  const size_t out_bytes = global.out_bytes(), rows = global.lse_count();
  std::vector<uint8_t> partial_out(out_bytes * c.world);
  std::vector<float> partial_lse(rows * c.world);
  const size_t elem = mlakit::dtype_bytes(gp.out_dtype);
  for (int r = 0; r < c.world; ++r) {
    const HostInputs local = mlakit::harness::shard_inputs(global, c.world, r, c.interleave);
    const CpuRun part = run_cpu(local);
    ASSERT_TRUE(part.status.ok()) << "rank " << r << ": " << part.status.to_string();
    // A row with no visible token on this rank: out 0 (every element written), lse -inf.
    for (size_t row = 0; row < rows; ++row) {
      const int i = static_cast<int>(row / gp.h_q / gp.s_q);
      const int t = static_cast<int>(row / gp.h_q % gp.s_q);
      const int64_t n = mlakit::cp_local_len(visible(gp, c.lens[i], t), c.world, r, c.interleave);
      if (n > 0) {
        ASSERT_TRUE(std::isfinite(part.lse[row])) << "rank " << r << " row " << row;
        continue;
      }
      ASSERT_EQ(part.lse[row], kNegInf) << "rank " << r << " row " << row;
      const uint8_t* o = &part.out[row * mlakit::kDv * elem];
      ASSERT_TRUE(std::all_of(o, o + mlakit::kDv * elem, [](uint8_t b) { return b == 0; }))
          << "rank " << r << " row " << row << ": an empty shard writes out 0";
    }
    std::memcpy(&partial_out[r * out_bytes], part.out.data(), out_bytes);
    std::memcpy(&partial_lse[r * rows], part.lse.data(), rows * sizeof(float));
  }

  std::vector<uint8_t> out(out_bytes, 0xff);
  std::vector<float> lse(rows, std::numeric_limits<float>::quiet_NaN());
  const MergeArgs m{.world = c.world,
                    .batch = global.batch,
                    .s_q = gp.s_q,
                    .h_q = gp.h_q,
                    .dtype = gp.out_dtype,
                    .partial_out = partial_out.data(),
                    .partial_lse = partial_lse.data(),
                    .sinks = gp.has_sinks ? global.sinks.data() : nullptr,
                    .out = out.data(),
                    .lse = lse.data()};
  const Status s = mlakit::merge_partials(Device::kCpu, m);
  ASSERT_TRUE(s.ok()) << s.to_string();
  const auto cmp = mlakit::harness::compare(gp, global.batch, out.data(), ref.out.data(),
                                            lse.data(), ref.lse.data());
  EXPECT_TRUE(cmp.passes(mlakit::harness::default_tolerance(gp))) << cmp.summary();
}

// Lengths covering the edges: 0, 1, fewer than the ranks, a shard boundary crossed by the MTP
// tokens, lengths that are not multiples of the interleave, one longer request.
std::vector<int32_t> edge_lens(int world, int interleave, std::mt19937_64& rng) {
  const int round = world * interleave;
  std::vector<int32_t> lens = {0, 1, world - 1, round + interleave / 2 + 1, interleave + 2};
  lens.push_back(static_cast<int32_t>(rng() % (2 * round + 37)));
  if (interleave > 1) lens.push_back(2 * round + interleave - 3);
  return lens;
}

Problem bf16_problem(int h_q, int s_q, int page_size) {
  Problem p;
  p.h_q = h_q;
  p.s_q = s_q;
  p.page_size = page_size;
  p.max_batch = 16;
  return p;
}

TEST(CpDecode, ShardedEqualsUnshardedInterleave1) {
  std::mt19937_64 rng(case_seed());
  for (const int h_q : {1, 16, 96, 128}) {
    const int world = 2 + static_cast<int>(rng() % 3), s_q = 1 + static_cast<int>(rng() % 4);
    const int page_size = h_q == 96 ? 1 : 16;
    expect_sharded_equals_unsharded(
        {bf16_problem(h_q, s_q, page_size), world, 1, edge_lens(world, 1, rng)}, rng());
  }
}

TEST(CpDecode, ShardedEqualsUnshardedInterleave64) {
  std::mt19937_64 rng(case_seed());
  for (const int h_q : {1, 16, 96, 128}) {
    const int world = 2 + static_cast<int>(rng() % 3), s_q = 1 + static_cast<int>(rng() % 4);
    const int page_size = h_q == 16 ? 64 : 32;
    expect_sharded_equals_unsharded(
        {bf16_problem(h_q, s_q, page_size), world, 64, edge_lens(world, 64, rng)}, rng());
  }
}

TEST(CpDecode, EveryWorldSizeAndMtpDepth) {
  std::mt19937_64 rng(case_seed());
  for (const int world : {2, 3, 4}) {
    for (const int s_q : {1, 2, 3, 4}) {
      expect_sharded_equals_unsharded(
          {bf16_problem(16, s_q, 16), world, 1, edge_lens(world, 1, rng)}, rng());
    }
  }
}

TEST(CpDecode, OtherCachesAndDtypes) {
  std::mt19937_64 rng(case_seed());
  Problem fp16 = bf16_problem(16, 2, 16);
  fp16.q_dtype = fp16.kv_dtype = fp16.out_dtype = DType::kFP16;
  Problem fp8 = bf16_problem(16, 2, 64);
  fp8.kv_dtype = DType::kFP8E4M3;
  Problem blockwise = fp8;
  blockwise.kv_layout = KvLayout::kFp8Blockwise;
  Problem v4 = fp8;
  v4.kv_layout = KvLayout::kFp8V4;
  v4.d_qk = mlakit::kV4Dqk;
  for (const Problem& p : {fp16, fp8, blockwise, v4}) {
    expect_sharded_equals_unsharded({p, 3, 64, edge_lens(3, 64, rng)}, rng());
  }
}

TEST(CpDecode, SinksAppliedByTheMergeEqualTheUnshardedSinks) {
  std::mt19937_64 rng(case_seed());
  for (const int interleave : {1, 64}) {
    Problem p = bf16_problem(16, 3, 16);
    p.has_sinks = true;  // global only: shard_inputs drops it, the merge applies the sinks
    expect_sharded_equals_unsharded({p, 4, interleave, edge_lens(4, interleave, rng)}, rng());
  }
}

TEST(CpDecode, AllShardsButOneEmpty) {
  // Lengths within the first block of rank 0: every other rank's partial is the neutral state.
  std::mt19937_64 rng(case_seed());
  expect_sharded_equals_unsharded({bf16_problem(16, 4, 16), 4, 64, {0, 1, 5, 63, 64}}, rng());
}

TEST(CpDecode, SparseTakesLocalizedIndicesAndIgnoresTheCpFields) {
  Problem p = bf16_problem(16, 2, 16);
  p.topk = 32;
  p.return_lse = true;
  p.max_seq_len = 100;
  const std::vector<int32_t> lens = {100, 7};
  const HostInputs in = mlakit::harness::make_inputs(p, lens, {.seed = case_seed()});
  const CpuRun plain = run_cpu(in);
  ASSERT_TRUE(plain.status.ok()) << plain.status.to_string();
  HostInputs rank = in;
  rank.problem.cp_world = 3;
  rank.problem.cp_rank = 2;
  rank.problem.cp_interleave = 64;
  const CpuRun cp = run_cpu(rank);
  ASSERT_TRUE(cp.status.ok()) << cp.status.to_string();
  EXPECT_EQ(plain.out, cp.out);
  EXPECT_EQ(0, std::memcmp(plain.lse.data(), cp.lse.data(), plain.lse.size() * sizeof(float)));
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

Problem cp_problem() {
  Problem p = bf16_problem(16, 1, 64);
  p.max_seq_len = 1024;
  p.cp_world = 4;
  p.cp_rank = 1;
  p.cp_interleave = 64;
  p.return_lse = true;
  return p;
}

TEST(CpValidate, AcceptsAValidRank) {
  EXPECT_TRUE(mlakit::validate(cp_problem()).ok());
  EXPECT_TRUE(mlakit::can_run("cpu", cp_problem()).ok());
  EXPECT_NE(mlakit::describe(cp_problem()).find("cp rank 1/4 interleave 64"), std::string::npos);
}

TEST(CpValidate, FieldsOutOfRange) {
  struct Rule {
    void (*edit)(Problem&);
    const char *arg, *expected, *given;
  };
  const Rule rules[] = {
      {[](Problem& p) { p.cp_world = 0; }, "cp_world", "1..64", "0"},
      {[](Problem& p) { p.cp_world = 65; }, "cp_world", "1..64", "65"},
      {[](Problem& p) { p.cp_rank = 4; }, "cp_rank", "0..3", "4"},
      {[](Problem& p) { p.cp_rank = -1; }, "cp_rank", "0..3", "-1"},
      {[](Problem& p) { p.cp_interleave = 0; }, "cp_interleave", "1..16777216", "0"},
      {[](Problem& p) { p.cp_world = 1, p.cp_rank = 1; }, "cp_rank", "0..0", "1"},
      {[](Problem& p) { p.return_lse = false; }, "return_lse", "merge_partials", "false"},
      {[](Problem& p) { p.has_sinks = true; }, "has_sinks", "MergeArgs::sinks", "true"},
  };
  for (const Rule& rule : rules) {
    Problem p = cp_problem();
    rule.edit(p);
    EXPECT_TRUE(is_error(mlakit::validate(p), StatusCode::kInvalidArgument, rule.arg,
                         {rule.expected, rule.given}));
    std::unique_ptr<Decoder> decoder;
    EXPECT_TRUE(is_error(Decoder::create(p, {.backend = "cpu"}, &decoder),
                         StatusCode::kInvalidArgument, rule.arg, {rule.expected, rule.given}));
  }
  // Without context parallelism sinks and a missing LSE stay allowed.
  Problem plain = bf16_problem(16, 1, 64);
  plain.has_sinks = true;
  plain.cp_interleave = 64;
  EXPECT_TRUE(mlakit::validate(plain).ok());
}

TEST(CpValidate, GlobalLengthWhoseShareOverflowsTheLocalTable) {
  Problem gp = bf16_problem(16, 1, 16);
  gp.max_seq_len = 200;
  const HostInputs global = mlakit::harness::make_inputs(gp, std::vector<int32_t>{200});
  HostInputs local = mlakit::harness::shard_inputs(global, 2, 0, 1, {.extra_block_slots = 0});
  ASSERT_TRUE(run_cpu(local).status.ok());
  // 100 local tokens on 7 pages of 16 = 112 slots: a global length of 226 (113 local) overflows.
  local.problem.max_seq_len = 300;
  local.seq_lens[0] = 226;
  EXPECT_TRUE(is_error(run_cpu(local).status, StatusCode::kInvalidArgument, "seq_lens[0]",
                       {"cp_rank 0", "112 slots", "226 (113 local tokens)"}));
  local.seq_lens[0] = 224;  // 112 local tokens: fits (the 7th page's NaN tail is read)
  EXPECT_TRUE(run_cpu(local).status.ok());
}

// The GPU backends decode a rank's shard (tests/gpu/cp_decode_test.cc): whatever else they say of
// a problem without a device, they do not refuse it for its cp fields.
TEST(CpValidate, GpuBackendsDoNotRefuseContextParallelism) {
  int checked = 0;
  for (const char* name : {"sm80", "sm90"}) {
    const mlakit::BackendEntry* entry = mlakit::find_backend(name);
    ASSERT_NE(entry, nullptr) << name;
    const Status s = entry->can_run(cp_problem(), mlakit::DeviceInfo{});
    if (s.message().find("not in this build") != std::string::npos) continue;
    EXPECT_EQ(s.message().find("cp_world"), std::string::npos) << name << ": " << s.to_string();
    EXPECT_EQ(s.message().find("context parallelism"), std::string::npos) << name;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "a build without the GPU backends";
}

// ---------------------------------------------------------------------------------------------
// The merge alone
// ---------------------------------------------------------------------------------------------

TEST(CpMerge, EmptyPartialsContributeNothingAndAllEmptyIsNeutral) {
  constexpr int kWorld = 3, kHeads = 2;
  std::vector<float> partial_out(kWorld * kHeads * mlakit::kDv);
  for (size_t k = 0; k < partial_out.size(); ++k) partial_out[k] = 0.001f * (k % 997);
  // [rank, head]. Head 0: rank 1 empty (its values NaN: must not be read). Head 1: every rank
  // empty.
  std::fill_n(&partial_out[(1 * kHeads + 0) * mlakit::kDv], mlakit::kDv, NAN);
  std::vector<float> partial_lse = {0.5f, kNegInf, kNegInf, kNegInf, 1.5f, kNegInf};
  std::vector<float> out(kHeads * mlakit::kDv, NAN), lse(kHeads, NAN);
  const MergeArgs m{.world = kWorld,
                    .batch = 1,
                    .s_q = 1,
                    .h_q = kHeads,
                    .dtype = DType::kFP32,
                    .partial_out = partial_out.data(),
                    .partial_lse = partial_lse.data(),
                    .out = out.data(),
                    .lse = lse.data()};
  ASSERT_TRUE(mlakit::merge_partials(Device::kCpu, m).ok());
  const double w0 = std::exp(0.5), w2 = std::exp(1.5);
  EXPECT_NEAR(lse[0], std::log(w0 + w2), 1e-6);
  for (int d = 0; d < mlakit::kDv; ++d) {
    const double want =
        (w0 * partial_out[d] + w2 * partial_out[(2 * kHeads) * mlakit::kDv + d]) / (w0 + w2);
    ASSERT_NEAR(out[d], want, 1e-6) << d;
  }
  EXPECT_EQ(lse[1], kNegInf);
  EXPECT_TRUE(std::all_of(out.begin() + mlakit::kDv, out.end(), [](float x) { return x == 0; }));
}

TEST(CpMerge, OnePartialIsTheIdentity) {
  std::vector<uint16_t> partial(4 * mlakit::kDv);
  for (size_t k = 0; k < partial.size(); ++k) partial[k] = static_cast<uint16_t>(0x3c00 + k % 512);
  std::vector<float> partial_lse = {1.0f, -2.0f, kNegInf, 30.0f};
  std::vector<uint16_t> out(partial.size());
  std::vector<float> lse(4);
  const MergeArgs m{.world = 1,
                    .batch = 2,
                    .s_q = 2,
                    .h_q = 1,
                    .dtype = DType::kFP16,
                    .partial_out = partial.data(),
                    .partial_lse = partial_lse.data(),
                    .out = out.data(),
                    .lse = lse.data()};
  ASSERT_TRUE(mlakit::merge_partials(Device::kCpu, m).ok());
  for (int row : {0, 1, 3}) {
    EXPECT_EQ(lse[row], partial_lse[row]);
    for (int d = 0; d < mlakit::kDv; ++d) {
      ASSERT_EQ(out[row * mlakit::kDv + d], partial[row * mlakit::kDv + d]) << row << " " << d;
    }
  }
  EXPECT_EQ(lse[2], kNegInf);
}

// Partials k strides apart (the NCCL merge's in-place slots keep each rank's out and LSE side by
// side): the same result, bit for bit, as the contiguous partials; the padding between them (NaN)
// is never read.
TEST(CpMerge, StridedPartialsEqualContiguousOnes) {
  constexpr int kWorld = 3, kRows = 2 * 3;  // batch 2, s_q 1, h_q 3
  constexpr int64_t kOutStride = kRows * mlakit::kDv + 24, kLseStride = kRows + 5;
  std::vector<uint16_t> contiguous(kWorld * kRows * mlakit::kDv), strided(kWorld * kOutStride);
  std::vector<float> lse_contiguous(kWorld * kRows), lse_strided(kWorld * kLseStride, NAN);
  std::fill(strided.begin(), strided.end(), uint16_t{0x7fc0});  // bf16 NaN
  for (int k = 0; k < kWorld; ++k) {
    for (int i = 0; i < kRows * mlakit::kDv; ++i) {
      const auto v = static_cast<uint16_t>(0x3e00 + (k * 131 + i * 7) % 256);
      contiguous[k * kRows * mlakit::kDv + i] = v;
      strided[k * kOutStride + i] = v;
    }
    for (int i = 0; i < kRows; ++i) {
      const float l = i == 1 && k == 2 ? kNegInf : 0.25f * (k - i);
      lse_contiguous[k * kRows + i] = l;
      lse_strided[k * kLseStride + i] = l;
    }
  }
  std::vector<uint16_t> out_a(kRows * mlakit::kDv), out_b(out_a.size());
  std::vector<float> lse_a(kRows), lse_b(kRows);
  MergeArgs m{.world = kWorld,
              .batch = 2,
              .s_q = 1,
              .h_q = 3,
              .dtype = DType::kBF16,
              .partial_out = contiguous.data(),
              .partial_lse = lse_contiguous.data(),
              .out = out_a.data(),
              .lse = lse_a.data()};
  ASSERT_TRUE(mlakit::merge_partials(Device::kCpu, m).ok());
  m.partial_out = strided.data();
  m.partial_lse = lse_strided.data();
  m.partial_out_stride = kOutStride;
  m.partial_lse_stride = kLseStride;
  m.out = out_b.data();
  m.lse = lse_b.data();
  ASSERT_TRUE(mlakit::merge_partials(Device::kCpu, m).ok());
  EXPECT_EQ(out_a, out_b);
  EXPECT_EQ(0, std::memcmp(lse_a.data(), lse_b.data(), kRows * sizeof(float)));
  // Strides that leave no room for a partial, or misalign out's 16-byte vectors.
  MergeArgs bad = m;
  bad.partial_out_stride = kRows * mlakit::kDv - 8;
  EXPECT_TRUE(is_error(mlakit::merge_partials(Device::kCpu, bad), StatusCode::kInvalidArgument,
                       "partial_out_stride", {"from b * s_q * h_q * 512 = 3072", "3064"}));
  bad.partial_out_stride = kRows * mlakit::kDv + 4;
  EXPECT_TRUE(is_error(mlakit::merge_partials(Device::kCpu, bad), StatusCode::kInvalidArgument,
                       "partial_out_stride", {"a multiple of 8", "3076"}));
  bad = m;
  bad.partial_lse_stride = kRows - 1;
  EXPECT_TRUE(is_error(mlakit::merge_partials(Device::kCpu, bad), StatusCode::kInvalidArgument,
                       "partial_lse_stride", {"from b * s_q * h_q = 6", "5"}));
  bad.partial_lse_stride = (int64_t{1} << 40) + 1;
  EXPECT_TRUE(is_error(mlakit::merge_partials(Device::kCpu, bad), StatusCode::kInvalidArgument,
                       "partial_lse_stride", {"to 2^40 elements"}));
}

TEST(CpMerge, ArgumentsAreCheckedByName) {
  std::vector<float> partial_out(2 * 2 * mlakit::kDv, 0.0f), partial_lse(4, 0.0f);
  std::vector<float> out(2 * mlakit::kDv), lse(2);
  const MergeArgs valid{.world = 2,
                        .batch = 1,
                        .s_q = 1,
                        .h_q = 2,
                        .dtype = DType::kFP32,
                        .partial_out = partial_out.data(),
                        .partial_lse = partial_lse.data(),
                        .out = out.data(),
                        .lse = lse.data()};
  ASSERT_TRUE(mlakit::merge_partials(Device::kCpu, valid).ok());
  struct Rule {
    void (*edit)(MergeArgs&);
    const char *arg, *expected, *given;
  };
  const Rule rules[] = {
      {[](MergeArgs& m) { m.world = 0; }, "world", "1..64", "0"},
      {[](MergeArgs& m) { m.world = 65; }, "world", "1..64", "65"},
      {[](MergeArgs& m) { m.batch = -1; }, "batch", "0..", "-1"},
      {[](MergeArgs& m) { m.s_q = 17; }, "s_q", "1..16", "17"},
      {[](MergeArgs& m) { m.h_q = 0; }, "h_q", "1..128", "0"},
      {[](MergeArgs& m) { m.dtype = DType::kFP8E4M3; }, "dtype", "bf16, fp16 or fp32", "fp8"},
      {[](MergeArgs& m) { m.partial_out = nullptr; }, "partial_out", "a pointer", "nullptr"},
      {[](MergeArgs& m) { m.partial_lse = nullptr; }, "partial_lse", "a pointer", "nullptr"},
      {[](MergeArgs& m) { m.out = nullptr; }, "out", "a pointer", "nullptr"},
      {[](MergeArgs& m) { m.out = static_cast<char*>(m.out) + 4; }, "out", "16-byte", "0x"},
      {[](MergeArgs& m) { m.out = const_cast<void*>(m.partial_out); }, "out",
       "memory apart from the inputs", "overlap partial_out"},
      {[](MergeArgs& m) { m.lse = const_cast<float*>(m.partial_lse) + 1; }, "lse",
       "memory apart from the inputs", "overlap partial_lse"},
  };
  for (const Rule& rule : rules) {
    MergeArgs m = valid;
    rule.edit(m);
    EXPECT_TRUE(is_error(mlakit::merge_partials(Device::kCpu, m), StatusCode::kInvalidArgument,
                         rule.arg, {rule.expected, rule.given}));
  }
  MergeArgs none = valid;
  none.batch = 0;
  none.out = nullptr;
  EXPECT_TRUE(mlakit::merge_partials(Device::kCpu, none).ok()) << "batch 0 is a no-op";
  if (!mlakit::current_device().present) {
    // Without a GPU (or without CUDA) kCuda fails: unsupported here, or a CUDA error.
    EXPECT_FALSE(mlakit::merge_partials(Device::kCuda, valid).ok());
  }
}

}  // namespace
}  // namespace mlakit_test
