// The append ops' cpu references (include/mlakit/ops.h) against independent brute-force checks:
// cache append byte for byte against tokens quantized here by the formulas of
// harness/workload.cc's fill_token (float log2, not the library's exponent bits) and decoded back
// through the cpu attention backend; the exact ceil(log2) of the scale rules. Plus the argument
// checks. The indexer logits and top-k are in ops_indexer_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "core/check.h"
#include "core/numeric.h"
#include "cpu_run.h"
#include "mlakit/ops.h"
#include "ops/quant.h"
#include "ops_rng.h"

namespace mlakit_test {
namespace {

using mlakit::ops::Device;
namespace ops = mlakit::ops;

constexpr uint8_t kPattern = 0x5a;  // what an untouched cache byte holds

// n rows of `width` random values in bf16 or fp16; the magnitude changes from token to token and
// some groups are all zero (the amax-0 rule) or tiny (subnormal e4m3 values).
std::vector<uint16_t> random_rows(Rng& rng, int64_t n, int width, DType dtype) {
  std::vector<uint16_t> v(n * width);
  const float magnitudes[] = {1.0f, 1e-3f, 37.0f, 1e-6f, 300.0f};
  for (int64_t t = 0; t < n; ++t) {
    const float m = magnitudes[t % 5];
    for (int d = 0; d < width; ++d) {
      const bool zero_group = t % 7 == 3 && d < 64;
      const float x = zero_group ? 0.0f : rng.normal() * m;
      v[t * width + d] =
          dtype == DType::kBF16 ? mlakit::float_to_bf16(x) : mlakit::float_to_fp16(x);
    }
  }
  return v;
}

float widen(uint16_t bits, DType dtype) {
  return dtype == DType::kBF16 ? mlakit::bf16_to_float(bits) : mlakit::fp16_to_float(bits);
}

// n distinct random slots of a cache of `tokens` slots, every fourth one -1.
std::vector<int64_t> random_slots(Rng& rng, int64_t n, int64_t tokens) {
  std::vector<int64_t> all(tokens);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng.gen);
  std::vector<int64_t> slots(all.begin(), all.begin() + n);
  for (int64_t t = 3; t < n; t += 4) slots[t] = -1;
  return slots;
}

float amax_of(const float* x, int n) {
  float m = 0;
  for (int d = 0; d < n; ++d) m = std::max(m, std::fabs(x[d]));
  return m;
}

void put_u16(uint8_t* at, uint16_t v) { std::memcpy(at, &v, 2); }

// The expected cache after appending: fill_token's formulas, written here independently.
void expect_token(const ops::AppendKvArgs& a, const float* x, int64_t slot, uint8_t* cache) {
  const size_t page_bytes = mlakit::kv_page_bytes(a.cache_dtype, a.cache_layout, a.page_size);
  uint8_t* page = cache + slot / a.page_size * page_bytes;
  const int64_t o = slot % a.page_size;
  if (a.cache_layout == KvLayout::kFp8Blockwise) {
    uint8_t* row = page + o * 656;
    for (int g = 0; g < 4; ++g) {
      const float amax = amax_of(x + 128 * g, 128);
      const float s = amax > 0 ? std::exp2(std::ceil(std::log2(amax / 448.0f))) : 1.0f;
      for (int d = 0; d < 128; ++d) row[128 * g + d] = mlakit::float_to_e4m3(x[128 * g + d] / s);
      std::memcpy(row + 512 + 4 * g, &s, 4);
    }
    for (int d = 0; d < 64; ++d) put_u16(row + 528 + 2 * d, mlakit::float_to_bf16(x[512 + d]));
  } else if (a.cache_layout == KvLayout::kFp8V4) {
    uint8_t* row = page + o * 576;
    uint8_t* scales = page + a.page_size * 576 + o * 8;
    for (int g = 0; g < 7; ++g) {
      const float amax = amax_of(x + 64 * g, 64);
      const int e =
          amax > 0 ? std::clamp(127 + static_cast<int>(std::ceil(std::log2(amax / 448.0f))), 0, 254)
                   : 127;
      scales[g] = static_cast<uint8_t>(e);
      for (int d = 0; d < 64; ++d) {
        row[64 * g + d] = mlakit::float_to_e4m3(x[64 * g + d] / std::ldexp(1.0f, e - 127));
      }
    }
    scales[7] = 0xff;
    for (int d = 0; d < 64; ++d) put_u16(row + 448 + 2 * d, mlakit::float_to_bf16(x[448 + d]));
  } else {
    const size_t bytes = mlakit::dtype_bytes(a.cache_dtype);
    uint8_t* row = page + o * 576 * bytes;
    for (int d = 0; d < 576; ++d) {
      if (a.cache_dtype == DType::kBF16) put_u16(row + 2 * d, mlakit::float_to_bf16(x[d]));
      if (a.cache_dtype == DType::kFP16) put_u16(row + 2 * d, mlakit::float_to_fp16(x[d]));
      if (a.cache_dtype == DType::kFP8E4M3) row[d] = mlakit::float_to_e4m3(x[d] / a.k_scale);
    }
  }
}

struct Layout {
  DType cache_dtype;
  KvLayout layout;
  DType input;
};

const Layout kLayouts[] = {
    {DType::kBF16, KvLayout::kDense, DType::kBF16},
    {DType::kFP16, KvLayout::kDense, DType::kFP16},
    {DType::kFP16, KvLayout::kDense, DType::kBF16},
    {DType::kFP8E4M3, KvLayout::kDense, DType::kBF16},
    {DType::kFP8E4M3, KvLayout::kFp8Blockwise, DType::kBF16},
    {DType::kFP8E4M3, KvLayout::kFp8Blockwise, DType::kFP16},
    {DType::kFP8E4M3, KvLayout::kFp8V4, DType::kBF16},
};

// Decodes the appended slots back through the cpu attention backend: sparse decode of one head
// over the single slot `slots[t]` returns that token's dequantized V (512 values) as bf16/fp16.
std::vector<float> decode_slots(const ops::AppendKvArgs& a, const std::vector<int32_t>& slots) {
  const int d_qk = mlakit::layout_d_qk(a.cache_layout);
  const int n = static_cast<int>(slots.size());
  Problem p;
  p.h_q = 1;
  p.d_qk = d_qk;
  p.page_size = a.page_size;
  p.max_batch = n;
  p.max_seq_len = static_cast<int32_t>(a.num_pages * a.page_size);
  p.q_dtype = p.out_dtype = a.cache_dtype == DType::kFP16 ? DType::kFP16 : DType::kBF16;
  p.kv_dtype = a.cache_dtype;
  p.kv_layout = a.cache_layout;
  p.topk = 1;
  std::unique_ptr<Decoder> decoder;
  const Status created = Decoder::create(p, {.backend = "cpu"}, &decoder);
  EXPECT_TRUE(created.ok()) << created.to_string();
  if (!created.ok()) return {};
  std::vector<uint16_t> q(static_cast<size_t>(n) * d_qk, 0x3f80);  // 1.0 in bf16, 1.875 in fp16
  std::vector<uint16_t> out(static_cast<size_t>(n) * 512);
  RunArgs r;
  r.batch = n;
  r.q = q.data();
  r.kv_cache = a.kv_cache;
  r.num_pages = a.num_pages;
  r.indices = slots.data();
  r.out = out.data();
  if (a.cache_dtype == DType::kFP8E4M3 && a.cache_layout == KvLayout::kDense) r.k_scale = a.k_scale;
  std::vector<uint8_t> workspace(decoder->workspace_bytes() + 256);
  void* ws = workspace.data() + (256 - reinterpret_cast<uintptr_t>(workspace.data()) % 256);
  const Status ran = decoder->run(r, ws, decoder->workspace_bytes(), nullptr);
  EXPECT_TRUE(ran.ok()) << ran.to_string();
  std::vector<float> values(out.size());
  for (size_t e = 0; e < out.size(); ++e) values[e] = widen(out[e], p.out_dtype);
  return values;
}

TEST(OpsAppendKv, ByteExactAndDecodesBack) {
  Rng rng(case_seed());
  for (const Layout& l : kLayouts) {
    for (const int page_size : {1, 16, 64}) {
      const int d_qk = mlakit::layout_d_qk(l.layout);
      ops::AppendKvArgs a;
      a.page_size = page_size;
      a.num_pages = 96 / page_size + 3;
      a.n_tokens = std::min<int64_t>(37, a.num_pages * page_size);
      a.kv_dtype = l.input;
      a.cache_dtype = l.cache_dtype;
      a.cache_layout = l.layout;
      a.kv_stride = d_qk + 8;  // a view: rows padded
      if (l.cache_dtype == DType::kFP8E4M3 && l.layout == KvLayout::kDense)
        a.k_scale = 4.0f;  // |x| up to ~1500: no saturation
      const auto kv = random_rows(rng, a.n_tokens, static_cast<int>(a.kv_stride), l.input);
      const auto slots = random_slots(rng, a.n_tokens, a.num_pages * page_size);
      const size_t bytes = a.num_pages * mlakit::kv_page_bytes(l.cache_dtype, l.layout, page_size);
      std::vector<uint8_t> cache(bytes, kPattern), expected(bytes, kPattern);
      a.kv = kv.data();
      a.slot_mapping = slots.data();
      a.kv_cache = cache.data();
      const std::string what = mlakit::str_cat(to_string(l.layout), " ", to_string(l.cache_dtype),
                                               " from ", to_string(l.input), " page ", page_size);
      ASSERT_TRUE(ops::append_kv(Device::kCpu, a).ok()) << what;

      std::vector<float> x(d_qk);
      std::vector<int32_t> used;
      std::vector<int64_t> used_tokens;
      for (int64_t t = 0; t < a.n_tokens; ++t) {
        if (slots[t] < 0) continue;
        for (int d = 0; d < d_qk; ++d) x[d] = widen(kv[t * a.kv_stride + d], l.input);
        expect_token(a, x.data(), slots[t], expected.data());
        used.push_back(static_cast<int32_t>(slots[t]));
        used_tokens.push_back(t);
      }
      // Every byte: the appended tokens as computed here, the rest untouched.
      size_t mismatches = 0, first = bytes;
      for (size_t e = 0; e < bytes; ++e) {
        if (cache[e] != expected[e]) {
          ++mismatches;
          first = std::min(first, e);
        }
      }
      EXPECT_EQ(mismatches, 0u) << what << ": first at byte " << first;

      // Decoded back by the attention backend: within e4m3 (or fp16/bf16) precision of x.
      const std::vector<float> v = decode_slots(a, used);
      ASSERT_EQ(v.size(), used.size() * 512) << what;
      const bool fp8 = l.cache_dtype == DType::kFP8E4M3;
      for (size_t m = 0; m < used.size(); ++m) {
        const int64_t t = used_tokens[m];
        for (int d = 0; d < 512; ++d) x[d] = widen(kv[t * a.kv_stride + d], l.input);
        const int group = l.layout == KvLayout::kFp8V4 ? 64 : 128;
        for (int d = 0; d < 512; ++d) {
          const bool rope = d >= d_qk - 64;
          const float xd = widen(kv[t * a.kv_stride + d], l.input);
          // e4m3: half an ulp (2^-4 relative) above the group's smallest normal, an absolute
          // 2^-10 of its scale below; the bf16/fp16 output adds 2^-8.
          const float scale =
              l.layout == KvLayout::kDense
                  ? a.k_scale
                  : std::exp2(std::ceil(std::log2(
                        std::max(amax_of(&x[d / group * group], group), 1e-30f) / 448.0f)));
          const float tol = (fp8 && !rope ? std::fabs(xd) / 16 + scale / 512 : 0.0f) +
                            std::fabs(xd) / 256 + 1e-7f;
          if (std::fabs(v[m * 512 + d] - xd) > tol) {
            ADD_FAILURE() << what << ": token " << t << " value " << d << " decodes to "
                          << v[m * 512 + d] << ", appended " << xd;
            break;
          }
        }
      }
    }
  }
}

TEST(OpsAppendKv, ScaleByPointerAndNoTokens) {
  Rng rng(case_seed());
  ops::AppendKvArgs a;
  a.page_size = 16;
  a.num_pages = 2;
  a.n_tokens = 5;
  a.cache_dtype = DType::kFP8E4M3;
  const auto kv = random_rows(rng, a.n_tokens, 576, DType::kBF16);
  const std::vector<int64_t> slots = {3, -1, 31, 0, 17};
  std::vector<uint8_t> by_value(2 * 16 * 576, kPattern), by_ptr = by_value;
  a.kv = kv.data();
  a.slot_mapping = slots.data();
  a.kv_cache = by_value.data();
  a.k_scale = 0.125f;
  ASSERT_TRUE(ops::append_kv(Device::kCpu, a).ok());
  const float scale = 0.125f;
  a.k_scale = NAN;
  a.k_scale_ptr = &scale;
  a.kv_cache = by_ptr.data();
  ASSERT_TRUE(ops::append_kv(Device::kCpu, a).ok());
  EXPECT_EQ(by_value, by_ptr);
  a.n_tokens = 0;
  a.kv = nullptr;
  a.slot_mapping = nullptr;
  EXPECT_TRUE(ops::append_kv(Device::kCpu, a).ok());
}

TEST(OpsAppendIndexer, ByteExactBothScales) {
  Rng rng(case_seed());
  for (const auto mode : {ops::IndexerScale::kAmax, ops::IndexerScale::kPowerOfTwo}) {
    for (const int page_size : {1, 64}) {
      ops::AppendIndexerArgs a;
      a.page_size = page_size;
      a.num_pages = 128 / page_size + 1;
      a.n_tokens = 41;
      a.scale = mode;
      const auto k = random_rows(rng, a.n_tokens, 128, DType::kBF16);
      const auto slots = random_slots(rng, a.n_tokens, a.num_pages * page_size);
      const size_t page_bytes = page_size * 132;
      std::vector<uint8_t> cache(a.num_pages * page_bytes, kPattern), expected = cache;
      a.k = k.data();
      a.slot_mapping = slots.data();
      a.index_cache = cache.data();
      ASSERT_TRUE(ops::append_indexer(Device::kCpu, a).ok());
      float x[128];
      for (int64_t t = 0; t < a.n_tokens; ++t) {
        if (slots[t] < 0) continue;
        for (int d = 0; d < 128; ++d) x[d] = mlakit::bf16_to_float(k[t * 128 + d]);
        float s = std::max(amax_of(x, 128), 1e-4f) / 448.0f;
        if (mode == ops::IndexerScale::kPowerOfTwo) s = std::exp2(std::ceil(std::log2(s)));
        uint8_t* page = expected.data() + slots[t] / page_size * page_bytes;
        const int64_t o = slots[t] % page_size;
        for (int d = 0; d < 128; ++d) page[o * 128 + d] = mlakit::float_to_e4m3(x[d] / s);
        std::memcpy(page + page_size * 128 + o * 4, &s, 4);
        // The round trip: within half an e4m3 ulp (and the subnormal step).
        for (int d = 0; d < 128; ++d) {
          const float back = mlakit::e4m3_to_float(page[o * 128 + d]) * s;
          EXPECT_LE(std::fabs(back - x[d]), std::fabs(x[d]) / 16 + s / 512) << t << " " << d;
        }
      }
      EXPECT_EQ(cache, expected) << "scale mode " << static_cast<int>(mode) << " page "
                                 << page_size;
    }
  }
}

TEST(OpsAppend, RefusesBadArguments) {
  std::vector<uint16_t> kv(576 * 2);
  std::vector<uint8_t> cache(4 * 1152);
  const std::vector<int64_t> slots = {0, 4};  // 4 is past the 4 slots
  ops::AppendKvArgs a;
  a.n_tokens = 2;
  a.kv = kv.data();
  a.slot_mapping = slots.data();
  a.kv_cache = cache.data();
  a.num_pages = 1;
  a.page_size = 4;
  const std::vector<uint8_t> before = cache;
  Status s = ops::append_kv(Device::kCpu, a);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("slot_mapping[1]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("given 4"), std::string::npos) << s.message();
  EXPECT_EQ(cache, before) << "nothing is written when a slot is refused";

  a.num_pages = 2;
  a.cache_dtype = DType::kFP8E4M3;
  s = ops::append_kv(Device::kCpu, a);
  EXPECT_NE(s.message().find("k_scale / k_scale_ptr"), std::string::npos) << s.message();
  a.k_scale = 1.0f;
  a.cache_layout = KvLayout::kFp8Blockwise;
  s = ops::append_kv(Device::kCpu, a);
  EXPECT_NE(s.message().find("k_scale / k_scale_ptr"), std::string::npos) << s.message();
  a.k_scale = NAN;
  a.kv_dtype = DType::kFP32;
  s = ops::append_kv(Device::kCpu, a);
  EXPECT_NE(s.message().find("kv_dtype: expected bf16 or fp16, given fp32"), std::string::npos)
      << s.message();
  a.kv_dtype = DType::kBF16;
  a.kv_stride = 100;
  s = ops::append_kv(Device::kCpu, a);
  EXPECT_NE(s.message().find("kv_stride"), std::string::npos) << s.message();
}

// The exact ceil(log2(x)) of the scale rules: 2^(e-1) < x <= 2^e, for powers of two, their
// neighbours, subnormals and random values (a float log2 gets some of these wrong).
TEST(OpsQuant, CeilLog2IsExact) {
  Rng rng(case_seed());
  std::vector<float> xs = {std::numeric_limits<float>::denorm_min(), 3e-45f, 1e-40f,
                           std::numeric_limits<float>::min(),        1.0f,   448.0f,
                           std::numeric_limits<float>::max()};
  for (int e = -149; e <= 127; ++e) {
    const float p = std::ldexp(1.0f, e);
    xs.push_back(p);
    xs.push_back(std::nextafter(p, 0.0f));
    xs.push_back(std::nextafter(p, INFINITY));
  }
  for (int n = 0; n < 10000; ++n)
    xs.push_back(
        std::ldexp(1.0f + rng.normal() * rng.normal(), static_cast<int>(rng.below(250)) - 125));
  for (const float x : xs) {
    if (!(x > 0) || !std::isfinite(x)) continue;
    const int e = ops::ceil_log2(x);
    EXPECT_LE(static_cast<double>(x), std::ldexp(1.0, e)) << x;
    EXPECT_GT(static_cast<double>(x), std::ldexp(1.0, e - 1)) << x;
    if (e >= -149 && e <= 127) EXPECT_EQ(ops::pow2(e), std::ldexp(1.0f, e)) << e;
  }
}

}  // namespace
}  // namespace mlakit_test
