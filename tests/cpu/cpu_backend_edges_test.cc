// The cpu backend against the float64 reference on edge cases built by hand, which random inputs
// rarely hit: sparse rows with duplicates, empty rows and topk_lens 0; the V4 byte layout written
// byte for byte; the extra cache's edges.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "cpu_run.h"
#include "harness/workload.h"
#include "mlakit/mlakit.h"
#include "naive_reference.h"
#include "reference_match.h"

namespace mlakit_test {
namespace {

// Sparse edge cases the random indices rarely hit: a query token whose slots are all empty, one
// slot listed topk times, slots of another request, and topk_lens 0.
TEST(CpuBackend, SparseDuplicatesEmptyRowsAndZeroTopkLens) {
  const Problem p{.h_q = 8,
                  .s_q = 2,
                  .page_size = 16,
                  .max_batch = 3,
                  .max_seq_len = 64,
                  .topk = 8,
                  .return_lse = true};
  const uint64_t seed = case_seed();
  HostInputs in = mlakit::harness::make_inputs(p, std::vector<int32_t>{40, 10, 30},
                                               {.seed = seed, .topk_lens = true});
  const int32_t other = in.block_table[1 * in.block_table_stride] * p.page_size + 3;  // request 1
  auto row = [&](int i, int t) { return &in.indices[(i * p.s_q + t) * p.topk]; };
  std::fill_n(row(0, 0), p.topk, -1);     // nothing visible
  std::fill_n(row(0, 1), p.topk, other);  // one slot, 8 times
  row(1, 0)[0] = other;  // another request's slot, listed twice around an empty slot
  row(1, 0)[1] = -1;
  row(1, 0)[2] = other;
  in.topk_lens = {p.topk, p.topk, 0};  // request 2 sees nothing

  const NaiveResult ref = naive_attention(in);
  EXPECT_EQ(ref.visible[0], 0);
  EXPECT_EQ(ref.visible[1], p.topk);
  EXPECT_EQ(ref.visible[4], 0);
  EXPECT_EQ(ref.visible[5], 0);
  const CpuRun run = run_cpu(in);
  ASSERT_TRUE(run.status.ok()) << run.status.to_string();
  EXPECT_TRUE(matches_reference(in, run, ref)) << "seed " << seed;

  // A token seen 8 times: uniform weights over one value, so out = that token's latent (rounded)
  // and lse = its score + ln 8.
  for (int h = 0; h < p.h_q; ++h) {
    const int64_t r = (0 * p.s_q + 1) * p.h_q + h;
    std::vector<double> kv(576), q(576);
    for (int d = 0; d < 576; ++d) {
      uint16_t kb, qb;
      std::memcpy(&kb, in.kv.data() + (static_cast<int64_t>(other) * 576 + d) * 2, 2);
      std::memcpy(&qb, in.q.data() + (r * 576 + d) * 2, 2);
      kv[d] = decode_bf16(kb), q[d] = decode_bf16(qb);
    }
    double s = 0;
    for (int d = 0; d < 576; ++d) s += q[d] * kv[d];
    EXPECT_NEAR(run.lse[r], s * in.softmax_scale + std::log(8.0), kLseTolerance) << "head " << h;
    for (int d = 0; d < kDv; ++d) {
      ASSERT_EQ(decode_out(run.out, r * kDv + d, DType::kBF16), kv[d])
          << "head " << h << " d " << d;
    }
  }
}

// The V4 byte layout, written by hand rather than by the workload generator: pages of 3 tokens,
// each page its 3 data rows (448 e4m3, 64 bf16), then its 3 scale rows (7 UE8M0 exponents and a
// pad byte), then padding to 4 * 576 bytes. Everything not written is 0xff (NaN as e4m3, bf16 and
// UE8M0): one selected token gives out = its dequantized 512 values exactly.
TEST(CpuBackend, V4LayoutByteForByte) {
  constexpr int kPage = 3, kPageBytes = 4 * 576;  // 3 * 584 = 1752, padded to 2304
  static_assert(kPage * 584 <= kPageBytes && kPageBytes - 576 < kPage * 584);
  EXPECT_EQ(mlakit::kv_page_bytes(DType::kFP8E4M3, KvLayout::kFp8V4, kPage), size_t{kPageBytes});
  const Problem p{.h_q = 2,
                  .d_qk = 512,
                  .page_size = kPage,
                  .max_batch = 1,
                  .q_dtype = DType::kBF16,
                  .kv_dtype = DType::kFP8E4M3,
                  .kv_layout = KvLayout::kFp8V4,
                  .topk = 3,
                  .return_lse = true};
  HostInputs in;
  in.problem = p;
  in.batch = 1;
  in.num_pages = 2;
  in.kv.assign(2 * kPageBytes, 0xff);
  const int slot = 4;  // page 1, offset 1
  uint8_t* page = in.kv.data() + kPageBytes;
  uint8_t* data = page + 1 * 576;
  uint8_t* scales = page + kPage * 576 + 1 * 8;
  std::vector<double> value(512);
  for (int d = 0; d < 448; ++d) {
    data[d] = d % 2 ? 0x38 : 0xb0;  // e4m3 1.0 and -0.5
    value[d] = (d % 2 ? 1.0 : -0.5) * std::ldexp(1.0, d / 64 - 3);
  }
  for (int g = 0; g < 7; ++g) scales[g] = static_cast<uint8_t>(127 + g - 3);  // 2^(g - 3)
  for (int d = 0; d < 64; ++d) {
    value[448 + d] = (d - 32) / 16.0;  // exact in bf16
    const uint16_t bits = mlakit::float_to_bf16(static_cast<float>(value[448 + d]));
    std::memcpy(data + 448 + 2 * d, &bits, 2);
  }
  in.indices = {slot, -1, slot};  // listed twice: still one value, weight 1
  in.q.resize(2 * 512 * 2);
  std::vector<double> q(2 * 512);
  for (int k = 0; k < 2 * 512; ++k) {
    q[k] = ((k * 7) % 11 - 5) / 64.0;
    const uint16_t bits = mlakit::float_to_bf16(static_cast<float>(q[k]));
    std::memcpy(in.q.data() + 2 * k, &bits, 2);
  }
  in.softmax_scale = mlakit::kV4SoftmaxScale;

  for (const float k_scale : {NAN, 0.5f}) {  // the optional k_scale scales the e4m3 part only
    in.k_scale = k_scale;
    const double ks = std::isnan(k_scale) ? 1.0 : k_scale;
    const CpuRun run = run_cpu(in);
    ASSERT_TRUE(run.status.ok()) << run.status.to_string();
    for (int h = 0; h < 2; ++h) {
      double dot = 0;
      for (int d = 0; d < 512; ++d) {
        const double v = d < 448 ? value[d] * ks : value[d];
        dot += q[h * 512 + d] * v;
        ASSERT_EQ(decode_out(run.out, h * kDv + d, DType::kBF16), v)
            << "k_scale " << k_scale << ", head " << h << ", d " << d;
      }
      EXPECT_NEAR(run.lse[h], dot * mlakit::kV4SoftmaxScale + std::log(2.0), kLseTolerance);
    }
  }
}

// The extra cache's edges: a query token seeing only extra tokens, one seeing only main ones
// (extra lengths 0), one seeing nothing in either (out 0, lse -inf), and the same slot listed in
// both caches' index rows (two tokens of equal value), against the reference.
TEST(CpuBackend, ExtraCacheEdges) {
  const Problem p{.h_q = 8,
                  .s_q = 2,
                  .d_qk = 512,
                  .page_size = 16,
                  .max_batch = 3,
                  .max_seq_len = 64,
                  .kv_dtype = DType::kFP8E4M3,
                  .kv_layout = KvLayout::kFp8V4,
                  .has_sinks = true,
                  .topk = 8,
                  .extra_topk = 6,
                  .extra_page_size = 4,
                  .return_lse = true};
  const uint64_t seed = case_seed();
  HostInputs in = mlakit::harness::make_inputs(p, std::vector<int32_t>{40, 10, 30},
                                               {.seed = seed, .topk_lens = true});
  ASSERT_EQ(in.extra_topk_lens.size(), 3u);
  auto main_row = [&](int i, int t) { return &in.indices[(i * p.s_q + t) * p.topk]; };
  auto extra_row = [&](int i, int t) { return &in.extra_indices[(i * p.s_q + t) * p.extra_topk]; };
  in.topk_lens = {p.topk, p.topk, p.topk};
  in.extra_topk_lens = {p.extra_topk, 0, p.extra_topk};
  std::fill_n(main_row(0, 0), p.topk, -1);  // request 0, token 0: extra tokens only
  std::fill_n(main_row(2, 0), p.topk, -1);  // request 2, token 0: nothing at all
  std::fill_n(extra_row(2, 0), p.extra_topk, -1);
  // Request 2, token 1: the same (extra) slot listed in every extra slot, main empty.
  std::fill_n(main_row(2, 1), p.topk, -1);
  const int32_t one = extra_row(0, 1)[0] >= 0 ? extra_row(0, 1)[0] : extra_row(0, 1)[1];
  ASSERT_GE(one, 0);
  std::fill_n(extra_row(2, 1), p.extra_topk, one);

  const NaiveResult ref = naive_attention(in);
  int extra_visible = 0;
  for (int k = 0; k < p.extra_topk; ++k) extra_visible += extra_row(0, 0)[k] >= 0;
  EXPECT_EQ(ref.visible[0], extra_visible);
  EXPECT_GT(ref.visible[0], 0);
  EXPECT_EQ(ref.visible[4], 0);
  EXPECT_EQ(ref.visible[5], p.extra_topk);
  const CpuRun run = run_cpu(in);
  ASSERT_TRUE(run.status.ok()) << run.status.to_string();
  EXPECT_TRUE(matches_reference(in, run, ref)) << "seed " << seed;
  for (int h = 0; h < p.h_q; ++h) {
    EXPECT_EQ(run.lse[4 * p.h_q + h], -kInf) << "head " << h;
    for (int d = 0; d < kDv; ++d)
      ASSERT_EQ(decode_out(run.out, (4 * p.h_q + h) * kDv + d, p.out_dtype), 0.0);
  }

  // Without the extra cache's tokens the result differs: they are attended, not ignored.
  HostInputs main_only = in;
  main_only.extra_topk_lens = {0, 0, 0};
  const NaiveResult ref_main = naive_attention(main_only);
  EXPECT_EQ(ref_main.visible[0], 0);
  const CpuRun run_main = run_cpu(main_only);
  ASSERT_TRUE(run_main.status.ok()) << run_main.status.to_string();
  EXPECT_TRUE(matches_reference(main_only, run_main, ref_main));
  EXPECT_NE(run_main.lse[1 * p.h_q], run.lse[1 * p.h_q]) << "request 0, token 1";
  EXPECT_EQ(run_main.lse[2 * p.h_q], run.lse[2 * p.h_q]) << "request 1 (extra lengths 0 in both)";
}

}  // namespace
}  // namespace mlakit_test
