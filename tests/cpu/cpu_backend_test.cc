// Tests of the cpu backend, the oracle every GPU backend is checked against: its output against the
// independent float64 reference of naive_reference.h over every dtype, layout and feature; the
// checks of the data in host memory. The conversions are in numeric_test.cc, the C API in
// c_api_test.cc.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "cpu_run.h"
#include "harness/workload.h"
#include "mlakit/mlakit.h"
#include "naive_reference.h"

namespace mlakit_test {
namespace {

constexpr int kDv = mlakit::kDv;
constexpr double kInf = std::numeric_limits<double>::infinity();

double decode_out(const std::vector<uint8_t>& out, int64_t k, DType dtype) {
  uint16_t bits;
  std::memcpy(&bits, out.data() + 2 * k, sizeof(bits));
  return dtype == DType::kBF16 ? decode_bf16(bits) : decode_fp16(bits);
}

// One unit in the last place of `x` in the output type (bf16: 8 significant bits, fp16: 11, with
// subnormals spaced 2^-24).
double ulp_of(double x, DType dtype) {
  if (x == 0) return 0;
  int e;
  std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1): the ulp is 2^(e - significant bits)
  return dtype == DType::kBF16 ? std::ldexp(1.0, e - 8)
                               : std::max(std::ldexp(1.0, e - 11), 0x1p-24);
}

// Tolerance. The cpu backend computes in float32 (dot products over 576 values, a two-pass
// softmax with a float64 denominator, sums over at most a few thousand tokens): its value before
// the final store is within a few 1e-6 of max|ref| of the float64 reference at these shapes. It
// then rounds once to bf16 / fp16, an error of at most half an ulp of the element, hence at most
// half an ulp of max|ref|. So the bound is one ulp of the output type at max|ref| (a factor 2 of
// margin over the rounding for the float32 arithmetic), plus 1e-6 absolute for rows whose values
// are all tiny. Rows with no visible token must be exactly 0 (lse -inf). The lse is float32 of a
// value of magnitude < ~30: within 1e-4 absolute.
//
// That bound is the one GPU backends are held to; it cannot tell rounding from truncation. As the
// oracle, the cpu backend must also round each element to nearest: within half an ulp of the
// element itself plus the float32 arithmetic, 1e-4 * max|ref| (observed: below 4e-6 * max|ref|
// over this suite; truncating instead of rounding exceeds it by far).
constexpr double kAbsTolerance = 1e-6;
constexpr double kFloat32Slack = 1e-4;
constexpr double kLseTolerance = 1e-4;

::testing::AssertionResult matches_reference(const HostInputs& in, const CpuRun& run,
                                             const NaiveResult& ref) {
  const Problem& p = in.problem;
  const int64_t rows = static_cast<int64_t>(in.batch) * p.s_q * p.h_q;
  double max_ref = 0;
  for (const double r : ref.out) max_ref = std::max(max_ref, std::fabs(r));
  const double bound = ulp_of(max_ref, p.out_dtype) + kAbsTolerance;

  int64_t nonfinite = 0, over = 0, misrounded = 0, nonzero_empty = 0, worst = 0;
  int64_t first_nonfinite = -1;
  double max_err = 0, err2 = 0, ref2 = 0;
  for (int64_t k = 0; k < rows * kDv; ++k) {
    const double t = decode_out(run.out, k, p.out_dtype), r = ref.out[k];
    if (!std::isfinite(t)) {
      if (nonfinite++ == 0) first_nonfinite = k;
      continue;
    }
    if (std::isinf(ref.lse[k / kDv]) && t != 0) ++nonzero_empty;
    const double e = std::fabs(t - r);
    over += e > bound;
    const double half_ulp = 0.5 * ulp_of(std::max(std::fabs(t), std::fabs(r)), p.out_dtype);
    misrounded += e > half_ulp + kFloat32Slack * max_ref + kAbsTolerance;
    if (e > max_err) max_err = e, worst = k;
    err2 += e * e;
    ref2 += r * r;
  }
  const double rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);

  int64_t lse_bad = 0;
  double lse_err = 0;
  if (p.return_lse) {
    for (int64_t k = 0; k < rows; ++k) {
      const double t = run.lse[k], r = ref.lse[k];
      if (std::isinf(r)) {
        lse_bad += !(t == r);
        continue;
      }
      const double e = std::isfinite(t) ? std::fabs(t - r) : kInf;
      lse_err = std::max(lse_err, e);
      lse_bad += !(e <= kLseTolerance);
    }
  }

  char summary[512];
  std::snprintf(summary, sizeof(summary),
                "max err %.3e (bound %.3e = 1 ulp at max|ref| %.3e + %.0e), rel L2 %.3e, "
                "%lld over the bound, %lld not rounded to nearest, %lld non-finite, %lld nonzero "
                "in empty rows; lse max err %.3e, %lld lse mismatches",
                max_err, bound, max_ref, kAbsTolerance, rel_l2, static_cast<long long>(over),
                static_cast<long long>(misrounded), static_cast<long long>(nonfinite),
                static_cast<long long>(nonzero_empty), lse_err, static_cast<long long>(lse_bad));
  if (over == 0 && misrounded == 0 && nonfinite == 0 && nonzero_empty == 0 && lse_bad == 0) {
    return ::testing::AssertionSuccess() << summary;
  }
  const int64_t at = first_nonfinite >= 0 ? first_nonfinite : worst, row = at / kDv;
  return ::testing::AssertionFailure()
         << summary << "\n  " << (first_nonfinite >= 0 ? "first non-finite" : "worst") << " at [b "
         << row / (p.s_q * p.h_q) << ", t " << row / p.h_q % p.s_q << ", h " << row % p.h_q
         << ", d " << at % kDv << "]: cpu " << decode_out(run.out, at, p.out_dtype)
         << ", reference " << ref.out[at] << "\n  problem: " << mlakit::describe(p);
}

// ---------------------------------------------------------------------------------------------
// The backend against the reference: dtypes x page sizes, and dtypes x features
// ---------------------------------------------------------------------------------------------

struct Dtypes {
  const char* name;
  DType q, kv, out;
  KvLayout layout;
};

const Dtypes kDtypes[] = {
    {"bf16", DType::kBF16, DType::kBF16, DType::kBF16, KvLayout::kDense},
    {"fp16", DType::kFP16, DType::kFP16, DType::kFP16, KvLayout::kDense},
    {"fp8_q_bf16", DType::kBF16, DType::kFP8E4M3, DType::kBF16, KvLayout::kDense},
    {"fp8_q_fp8", DType::kFP8E4M3, DType::kFP8E4M3, DType::kBF16, KvLayout::kDense},
    {"fp8_q_fp16_out_fp16", DType::kFP16, DType::kFP8E4M3, DType::kFP16, KvLayout::kDense},
    {"blockwise_q_bf16", DType::kBF16, DType::kFP8E4M3, DType::kBF16, KvLayout::kFp8Blockwise},
    {"blockwise_q_fp16_out_fp16", DType::kFP16, DType::kFP8E4M3, DType::kFP16,
     KvLayout::kFp8Blockwise},
    {"v4_q_bf16", DType::kBF16, DType::kFP8E4M3, DType::kBF16, KvLayout::kFp8V4},
    {"v4_q_fp16_out_fp16", DType::kFP16, DType::kFP8E4M3, DType::kFP16, KvLayout::kFp8V4},
};

struct Shape {
  const char* name;
  int h_q = 16;
  int s_q = 1;
  bool causal = true;
  int page_size = 64;
  std::vector<int32_t> lens;  // cached lengths, one per request
  int variable_batch = 0;     // > 0: lens = make_seq_lens(variable_batch, variable_len, true)
  int variable_len = 0;
  bool sinks = false;
  int topk = 0;
  bool topk_lens = false;  // per-request lengths of the indices (and of the extra indices)
  int extra_topk = 0;      // an extra cache (sparse only)
  int extra_page_size = 0;
  bool lse = true;
  float magnitude = 1.0f;  // standard deviation of q and kv
  float softmax_scale = mlakit::kDefaultSoftmaxScale;
  float blockwise_k_scale = NAN;  // an optional extra k_scale for the blockwise and V4 layouts
  bool scales_by_pointer = false;
};

// Makes random inputs for `shape` in dtypes `dt`, runs the cpu backend and compares.
void check_case(const Dtypes& dt, const Shape& shape) {
  const Problem p{.h_q = shape.h_q,
                  .s_q = shape.s_q,
                  .d_qk = mlakit::layout_d_qk(dt.layout),
                  .page_size = shape.page_size,
                  .max_batch = 64,
                  .max_seq_len = 4096,
                  .q_dtype = dt.q,
                  .kv_dtype = dt.kv,
                  .out_dtype = dt.out,
                  .kv_layout = dt.layout,
                  .causal = shape.causal,
                  .has_sinks = shape.sinks,
                  .topk = shape.topk,
                  .extra_topk = shape.extra_topk,
                  .extra_page_size = shape.extra_page_size,
                  .return_lse = shape.lse};
  const uint64_t seed = case_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << ", " << mlakit::describe(p));
  const std::vector<int32_t> lens =
      shape.variable_batch > 0
          ? mlakit::harness::make_seq_lens(shape.variable_batch, shape.variable_len, true, seed)
          : shape.lens;
  HostInputs in = mlakit::harness::make_inputs(
      p, lens, {.seed = seed, .magnitude = shape.magnitude, .topk_lens = shape.topk_lens});
  in.softmax_scale = shape.softmax_scale;
  if (dt.layout != KvLayout::kDense) in.k_scale = shape.blockwise_k_scale;

  const NaiveResult ref = naive_attention(in);
  const CpuRun run = run_cpu(in, [&](RunArgs& a) {
    if (!shape.scales_by_pointer) return;
    if (!std::isnan(a.q_scale)) {
      a.q_scale_ptr = &in.q_scale;
      a.q_scale = NAN;
    }
    if (!std::isnan(a.k_scale)) {
      a.k_scale_ptr = &in.k_scale;
      a.k_scale = NAN;
    }
  });
  ASSERT_TRUE(run.status.ok()) << run.status.to_string();
  EXPECT_TRUE(matches_reference(in, run, ref));
}

void PrintTo(const Dtypes& dt, std::ostream* os) { *os << dt.name; }
void PrintTo(const Shape& shape, std::ostream* os) { *os << shape.name; }

class DtypePageSizeTest : public ::testing::TestWithParam<std::tuple<Dtypes, int /*page_size*/>> {};

TEST_P(DtypePageSizeTest, MatchesReference) {
  const auto& [dt, page_size] = GetParam();
  check_case(dt,
             {.name = "", .h_q = 8, .page_size = page_size, .lens = {0, 1, 63, 64, 65, 129, 300}});
}

INSTANTIATE_TEST_SUITE_P(Cpu, DtypePageSizeTest,
                         ::testing::Combine(::testing::ValuesIn(kDtypes),
                                            ::testing::Values(1, 16, 48, 64, 128)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_page" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Every feature in every dtype. Lengths 0, 1, 63, 64, 65, around s_q, and not multiples of the
// page size; one long request among short ones; the largest head count.
const std::vector<int32_t> kShortLens = {0, 1, 2, 3, 17, 64, 65};
const Shape kShapes[] = {
    {.name = "mixed_lengths", .lens = {0, 1, 63, 64, 65, 129, 300}},
    {.name = "variable_lengths", .page_size = 16, .variable_batch = 8, .variable_len = 100},
    {.name = "batch1_len1_no_lse", .h_q = 8, .lens = {1}, .lse = false},
    {.name = "all_empty", .h_q = 8, .lens = {0, 0, 0}},
    {.name = "sq2_causal", .h_q = 8, .s_q = 2, .page_size = 16, .lens = kShortLens},
    {.name = "sq3_causal", .h_q = 8, .s_q = 3, .page_size = 16, .lens = kShortLens},
    {.name = "sq4_causal", .h_q = 8, .s_q = 4, .page_size = 16, .lens = kShortLens},
    {.name = "sq2_noncausal", .h_q = 8, .s_q = 2, .causal = false, .lens = kShortLens},
    {.name = "sq16_causal", .h_q = 4, .s_q = 16, .page_size = 16, .lens = {0, 5, 16, 17, 100}},
    {.name = "sinks", .lens = {0, 1, 64, 150}, .sinks = true},
    {.name = "sinks_sq2_causal", .s_q = 2, .page_size = 16, .lens = kShortLens, .sinks = true},
    {.name = "sparse", .lens = {0, 1, 100, 300}, .topk = 64},
    {.name = "sparse_topk_lens_sq2",
     .s_q = 2,
     .page_size = 16,
     .lens = {0, 1, 100, 300},
     .topk = 48,
     .topk_lens = true},
    {.name = "sparse_sinks_page1",
     .s_q = 2,
     .page_size = 1,
     .lens = {0, 40, 70},
     .sinks = true,
     .topk = 32},
    // The extra cache (DeepSeek V4's window), attended in the same softmax as the main one: its
    // own page size, -1 slots, per-request lengths (0 included), sinks, s_q up to 4.
    {.name = "sparse_extra",
     .lens = {0, 1, 100, 300},
     .topk = 64,
     .extra_topk = 32,
     .extra_page_size = 16},
    {.name = "sparse_extra_lens_sinks_sq4",
     .s_q = 4,
     .page_size = 16,
     .lens = {0, 1, 100, 300, 7},
     .sinks = true,
     .topk = 48,
     .topk_lens = true,
     .extra_topk = 20,
     .extra_page_size = 3},
    {.name = "sparse_extra_page1_sq3",
     .h_q = 8,
     .s_q = 3,
     .page_size = 1,
     .lens = {0, 40, 70},
     .topk = 32,
     .extra_topk = 7,
     .extra_page_size = 64},
    {.name = "heads128", .h_q = 128, .lens = {1, 65, 130}},
    {.name = "long", .lens = {3, 2000, 0, 64}},
    {.name = "peaky_softmax", .lens = {1, 65, 200}, .magnitude = 3.0f},
    {.name = "custom_scales",
     .lens = {1, 65, 200},
     .softmax_scale = 0.1f,
     .blockwise_k_scale = 0.75f},
    {.name = "scales_by_pointer",
     .s_q = 2,
     .lens = {1, 65, 200},
     .sinks = true,
     .blockwise_k_scale = 0.75f,
     .scales_by_pointer = true},
};

class FeatureTest : public ::testing::TestWithParam<std::tuple<Shape, Dtypes>> {};

TEST_P(FeatureTest, MatchesReference) {
  const auto& [shape, dt] = GetParam();
  check_case(dt, shape);
}

INSTANTIATE_TEST_SUITE_P(Cpu, FeatureTest,
                         ::testing::Combine(::testing::ValuesIn(kShapes),
                                            ::testing::ValuesIn(kDtypes)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  std::get<1>(info.param).name;
                         });

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

// The cpu backend is the oracle: the same inputs must give the same bits every time, whatever the
// thread schedule.
TEST(CpuBackend, RepeatedRunsAreBitwiseEqual) {
  const Problem p{.h_q = 32,
                  .s_q = 2,
                  .page_size = 16,
                  .max_batch = 4,
                  .max_seq_len = 512,
                  .has_sinks = true,
                  .return_lse = true};
  const HostInputs in =
      mlakit::harness::make_inputs(p, std::vector<int32_t>{5, 300, 0, 77}, {.seed = case_seed()});
  const CpuRun a = run_cpu(in), b = run_cpu(in);
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0);
}

// ---------------------------------------------------------------------------------------------
// Data checks of the cpu backend (it can read host memory; GPU backends cannot)
// ---------------------------------------------------------------------------------------------

// Expects an invalid-argument status whose message starts with `arg` and contains `given`.
::testing::AssertionResult is_invalid(const Status& s, const std::string& arg,
                                      const std::string& given) {
  if (s.code() != StatusCode::kInvalidArgument) {
    return ::testing::AssertionFailure() << "expected invalid argument, got " << s.to_string();
  }
  if (s.message().rfind(arg, 0) != 0 || s.message().find("given " + given) == std::string::npos) {
    return ::testing::AssertionFailure() << "message \"" << s.message() << "\" should start with \""
                                         << arg << "\" and contain \"given " << given << "\"";
  }
  return ::testing::AssertionSuccess();
}

HostInputs small_dense(uint64_t seed) {
  const Problem p{.h_q = 4, .page_size = 16, .max_batch = 2, .max_seq_len = 128};
  return mlakit::harness::make_inputs(p, std::vector<int32_t>{20, 70}, {.seed = seed});
}

HostInputs small_sparse(uint64_t seed) {
  const Problem p{
      .h_q = 4, .s_q = 2, .page_size = 16, .max_batch = 2, .max_seq_len = 128, .topk = 8};
  return mlakit::harness::make_inputs(p, std::vector<int32_t>{20, 70},
                                      {.seed = seed, .topk_lens = true});
}

TEST(CpuDataChecks, PageIdOutOfRange) {
  HostInputs in = small_dense(case_seed());
  in.block_table[1 * in.block_table_stride + 4] =
      static_cast<int32_t>(in.num_pages);  // 70: 5 pages
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "block_table[1, 4]", std::to_string(in.num_pages)));
}

TEST(CpuDataChecks, SeqLenAboveMaxSeqLen) {
  // GPU workspaces are sized from max_seq_len: the reference refuses longer sequences.
  HostInputs in = small_dense(case_seed());
  in.problem.max_seq_len = 64;  // request 1 holds 70 tokens
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "seq_lens[1]", "70"));
}

TEST(CpuDataChecks, NegativePageId) {
  HostInputs in = small_dense(case_seed());
  in.block_table[0] = -1;
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "block_table[0, 0]", "-1"));
}

TEST(CpuDataChecks, SeqLenBeyondBlockTable) {
  HostInputs in = small_dense(case_seed());
  const int64_t too_long = in.block_table_stride * in.problem.page_size + 1;
  in.seq_lens[1] = static_cast<int32_t>(too_long);
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "seq_lens[1]", std::to_string(too_long)));
}

TEST(CpuDataChecks, NegativeSeqLen) {
  HostInputs in = small_dense(case_seed());
  in.seq_lens[0] = -3;
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "seq_lens[0]", "-3"));
}

TEST(CpuDataChecks, SparseIndexOutOfRange) {
  HostInputs in = small_sparse(case_seed());
  const int64_t slots = in.num_pages * in.problem.page_size;
  in.indices[1 * 2 * 8 + 8 + 5] = static_cast<int32_t>(slots);  // request 1, token 1, k 5
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "indices[1, 1, 5]", std::to_string(slots)));
}

TEST(CpuDataChecks, SparseIndexBelowMinusOne) {
  HostInputs in = small_sparse(case_seed());
  in.indices[3] = -2;
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "indices[0, 0, 3]", "-2"));
}

TEST(CpuDataChecks, TopkLensOutOfRange) {
  HostInputs in = small_sparse(case_seed());
  in.topk_lens[1] = 9;
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "topk_lens[1]", "9"));
}

HostInputs small_extra(uint64_t seed) {
  const Problem p{.h_q = 4,
                  .s_q = 2,
                  .d_qk = 512,
                  .page_size = 16,
                  .max_batch = 2,
                  .max_seq_len = 128,
                  .kv_dtype = DType::kFP8E4M3,
                  .kv_layout = KvLayout::kFp8V4,
                  .topk = 8,
                  .extra_topk = 6,
                  .extra_page_size = 4};
  return mlakit::harness::make_inputs(p, std::vector<int32_t>{5, 40},
                                      {.seed = seed, .topk_lens = true});
}

TEST(CpuDataChecks, ExtraIndexOutOfRange) {
  HostInputs in = small_extra(case_seed());
  const int64_t slots = in.extra_num_pages * 4;
  in.extra_indices[1 * 2 * 6 + 6 + 2] = static_cast<int32_t>(slots);  // request 1, token 1, k 2
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "extra_indices[1, 1, 2]", std::to_string(slots)));
  in = small_extra(case_seed());
  in.extra_indices[4] = -7;
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "extra_indices[0, 0, 4]", "-7"));
}

TEST(CpuDataChecks, ExtraTopkLensOutOfRange) {
  HostInputs in = small_extra(case_seed());
  in.extra_topk_lens[0] = 7;
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "extra_topk_lens[0]", "7"));
  in.extra_topk_lens[0] = -1;
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "extra_topk_lens[0]", "-1"));
}

// Sinks live in host memory for the cpu backend, so it checks them: a NaN sink made the head's
// output NaN. -inf (no sink) and +inf (the sink takes all the mass: out 0) are valid limits.
TEST(CpuDataChecks, NanSinkIsRefused) {
  Problem p{.h_q = 4, .page_size = 16, .max_batch = 2, .max_seq_len = 128, .has_sinks = true};
  HostInputs in = mlakit::harness::make_inputs(p, std::vector<int32_t>{20, 70}, {.seed = 3});
  in.sinks[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(is_invalid(run_cpu(in).status, "sinks[2]", "nan"));
  in.sinks[2] = std::numeric_limits<float>::infinity();
  const CpuRun r = run_cpu(in);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  const auto* out = reinterpret_cast<const uint16_t*>(r.out.data());
  for (int d = 0; d < mlakit::kDv; ++d) EXPECT_EQ(out[2 * mlakit::kDv + d] & 0x7fff, 0) << d;
}

// Scales passed by pointer are in host memory for the cpu backend: it checks them as it checks
// host values (validate_args cannot read a pointer). 0, negative, NaN and inf scaled every
// output to NaN or zero.
TEST(CpuDataChecks, ScaleByPointerOutOfRangeIsRefused) {
  Problem p{.h_q = 4, .page_size = 16, .max_batch = 2, .max_seq_len = 128};
  p.q_dtype = p.kv_dtype = DType::kFP8E4M3;
  const HostInputs in = mlakit::harness::make_inputs(p, std::vector<int32_t>{20, 70}, {.seed = 4});
  for (const float bad : {0.0f, -0.5f, std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity()}) {
    const float good = 0.25f;
    const std::string given = (std::ostringstream() << bad).str();
    EXPECT_TRUE(is_invalid(run_cpu(in,
                                   [&](RunArgs& a) {
                                     a.q_scale = std::numeric_limits<float>::quiet_NaN();
                                     a.q_scale_ptr = &bad;
                                   })
                               .status,
                           "q_scale_ptr[0]", given));
    EXPECT_TRUE(is_invalid(run_cpu(in,
                                   [&](RunArgs& a) {
                                     a.k_scale = std::numeric_limits<float>::quiet_NaN();
                                     a.k_scale_ptr = &bad;
                                   })
                               .status,
                           "k_scale_ptr[0]", given));
    EXPECT_TRUE(run_cpu(in, [&](RunArgs& a) {
                  a.k_scale = std::numeric_limits<float>::quiet_NaN();
                  a.k_scale_ptr = &good;
                }).status.ok());
  }
}

}  // namespace
}  // namespace mlakit_test
