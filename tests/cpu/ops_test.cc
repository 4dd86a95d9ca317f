// The ops' cpu references (include/mlakit/ops.h) against independent brute-force checks:
// cache append byte for byte against tokens quantized here by the formulas of
// harness/workload.cc's fill_token (float log2, not the library's exponent bits) and decoded back
// through the cpu attention backend; the indexer logits against a float64 brute force; top-k
// against a stable sort. Plus the argument checks.
#include "mlakit/ops.h"

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
#include "ops/quant.h"

namespace mlakit_test {
namespace {

using mlakit::ops::Device;
namespace ops = mlakit::ops;

constexpr uint8_t kPattern = 0x5a;  // what an untouched cache byte holds

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  float normal() { return std::normal_distribution<float>(0.0f, 1.0f)(gen); }
  int64_t below(int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(gen); }
};

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

// ---------------------------------------------------------------------------------------------
// Indexer logits
// ---------------------------------------------------------------------------------------------

uint8_t random_e4m3(Rng& rng) {
  for (;;) {
    const auto b = static_cast<uint8_t>(rng.below(256));
    if ((b & 0x7f) != 0x7f) return b;  // not NaN
  }
}

TEST(OpsIndexerLogits, MatchesFloat64BruteForce) {
  Rng rng(case_seed());
  struct Case {
    int batch, next_n, heads, page_size;
    std::vector<int32_t> lens;
  };
  const Case cases[] = {
      {4, 1, 64, 64, {0, 1, 63, 200}},
      {3, 2, 64, 16, {1, 2, 77}},
      {2, 4, 8, 1, {3, 40}},
      {1, 3, 128, 32, {129}},
  };
  for (const Case& c : cases) {
    const int64_t max_len = *std::max_element(c.lens.begin(), c.lens.end()) + 5;
    const int64_t bt_stride = (max_len + c.page_size - 1) / c.page_size + 1;
    const int64_t num_pages = c.batch * bt_stride + 2;
    const size_t page_bytes = ops::indexer_page_bytes(c.page_size);
    // Every page NaN-poisoned first (e4m3 NaN keys, NaN scales); the used ones get random data.
    std::vector<uint8_t> cache(num_pages * page_bytes, 0x7f);
    std::vector<int32_t> table(c.batch * bt_stride);
    std::vector<int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.gen);
    int next = 0;
    for (int i = 0; i < c.batch; ++i) {
      for (int64_t pg = 0; pg < bt_stride; ++pg) {
        const bool used = pg * c.page_size < c.lens[i];
        table[i * bt_stride + pg] = used ? perm[next++] : 1 << 30;  // unused: out of range
        if (!used) continue;
        uint8_t* page = cache.data() + table[i * bt_stride + pg] * page_bytes;
        for (int64_t e = 0; e < int64_t{c.page_size} * 128; ++e) page[e] = random_e4m3(rng);
        for (int o = 0; o < c.page_size; ++o) {
          const float s = std::exp(rng.normal()) * 0.01f;
          std::memcpy(page + c.page_size * 128 + 4 * o, &s, 4);
        }
      }
    }
    const int64_t rows = int64_t{c.batch} * c.next_n;
    std::vector<uint8_t> q(rows * c.heads * 128);
    for (auto& b : q) b = random_e4m3(rng);
    std::vector<float> w(rows * c.heads);
    for (auto& x : w) x = rng.normal();
    const int64_t ld = max_len + 3;
    std::vector<float> logits(rows * ld, NAN);

    ops::IndexerLogitsArgs a;
    a.batch = c.batch;
    a.next_n = c.next_n;
    a.heads = c.heads;
    a.q = q.data();
    a.weights = w.data();
    a.index_cache = cache.data();
    a.num_pages = num_pages;
    a.page_size = c.page_size;
    a.block_table = table.data();
    a.block_table_stride = bt_stride;
    a.seq_lens = c.lens.data();
    a.logits = logits.data();
    a.max_len = max_len;
    a.logits_stride = ld;
    const Status s = ops::indexer_logits(Device::kCpu, a);
    ASSERT_TRUE(s.ok()) << s.to_string();

    for (int i = 0; i < c.batch; ++i) {
      for (int t = 0; t < c.next_n; ++t) {
        const int64_t r = int64_t{i} * c.next_n + t;
        for (int64_t j = 0; j < ld; ++j) {
          const float got = logits[r * ld + j];
          if (j >= max_len) {
            EXPECT_TRUE(std::isnan(got)) << "column past max_len written";
            continue;
          }
          // Visible: j <= L - next_n + t.
          if (j > int64_t{c.lens[i]} - c.next_n + t) {
            EXPECT_EQ(got, -std::numeric_limits<float>::infinity()) << i << " " << t << " " << j;
            continue;
          }
          const int32_t page = table[i * bt_stride + j / c.page_size];
          const uint8_t* base = cache.data() + page * page_bytes;
          float scale;
          std::memcpy(&scale, base + c.page_size * 128 + 4 * (j % c.page_size), 4);
          double expect = 0;
          for (int h = 0; h < c.heads; ++h) {
            double dot = 0;
            for (int d = 0; d < 128; ++d) {
              dot += static_cast<double>(mlakit::e4m3_to_float(q[(r * c.heads + h) * 128 + d])) *
                     mlakit::e4m3_to_float(base[(j % c.page_size) * 128 + d]);
            }
            expect += w[r * c.heads + h] * std::max(0.0, dot * scale);
          }
          EXPECT_NEAR(got, expect, 1e-6 * std::fabs(expect) + 1e-30)
              << "row " << r << " position " << j;
        }
      }
    }
  }
}

TEST(OpsIndexerLogits, RefusesBadArgumentsAndCuda) {
  std::vector<uint8_t> q(64 * 128), cache(132 * 64);
  std::vector<float> w(64), logits(100);
  const std::vector<int32_t> table = {0, 5};
  std::vector<int32_t> lens = {100};
  ops::IndexerLogitsArgs a;
  a.batch = 1;
  a.q = q.data();
  a.weights = w.data();
  a.index_cache = cache.data();
  a.num_pages = 1;
  a.block_table = table.data();
  a.block_table_stride = 2;
  a.seq_lens = lens.data();
  a.logits = logits.data();
  a.max_len = 100;
  Status s = ops::indexer_logits(Device::kCpu, a);
  EXPECT_NE(s.message().find("block_table[0, 1]: expected a page id in 0..0, given 5"),
            std::string::npos)
      << s.message();
  lens[0] = 101;
  s = ops::indexer_logits(Device::kCpu, a);
  EXPECT_NE(s.message().find("seq_lens[0]: expected 0..100, given 101"), std::string::npos)
      << s.message();
  a.next_n = 17;
  s = ops::indexer_logits(Device::kCpu, a);
  EXPECT_NE(s.message().find("next_n: expected 1..16, given 17"), std::string::npos) << s.message();
  a.next_n = 1;
  EXPECT_EQ(ops::indexer_logits(Device::kCuda, a).code(), StatusCode::kUnsupported);
}

// ---------------------------------------------------------------------------------------------
// Top-k
// ---------------------------------------------------------------------------------------------

// The k largest of row[0:n] by a stable sort (ties: lower position), in position order.
std::vector<int64_t> brute_topk(const float* row, int64_t n, int k) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return row[x] > row[y]; });
  order.resize(std::min<int64_t>(n, k));
  std::sort(order.begin(), order.end());
  return order;
}

struct TopkCase {
  int k;
  int next_n;
  int page_size;
  std::vector<int32_t> lens;
  bool ties;  // values from a handful of levels
};

void run_topk_case(const TopkCase& c, Rng& rng) {
  const int batch = static_cast<int>(c.lens.size());
  const int64_t max_len = std::max<int64_t>(1, *std::max_element(c.lens.begin(), c.lens.end()));
  const int64_t bt_stride = (max_len + c.page_size - 1) / c.page_size + 2;
  const int64_t rows = int64_t{batch} * c.next_n;
  const int64_t ld = max_len + 7;
  std::vector<float> logits(rows * ld);
  for (auto& x : logits) {
    x = c.ties ? static_cast<float>(rng.below(5) + 1) : rng.normal();
  }
  std::vector<int32_t> table(batch * bt_stride);
  for (auto& id : table) id = static_cast<int32_t>(rng.below(1000));
  std::vector<int32_t> indices(rows * c.k, 0x7eadbeef), positions(rows * c.k, 0x7eadbeef);
  ops::TopkArgs a;
  a.batch = batch;
  a.next_n = c.next_n;
  a.k = c.k;
  a.logits = logits.data();
  a.max_len = max_len;
  a.logits_stride = ld;
  a.seq_lens = c.lens.data();
  a.block_table = table.data();
  a.block_table_stride = bt_stride;
  a.page_size = c.page_size;
  a.indices = indices.data();
  a.positions = positions.data();
  const Status s = ops::topk_indices(Device::kCpu, a);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int i = 0; i < batch; ++i) {
    for (int t = 0; t < c.next_n; ++t) {
      const int64_t r = int64_t{i} * c.next_n + t;
      const int64_t n = std::clamp<int64_t>(int64_t{c.lens[i]} - c.next_n + 1 + t, 0, c.lens[i]);
      const auto want = brute_topk(logits.data() + r * ld, n, c.k);
      for (int m = 0; m < c.k; ++m) {
        const int64_t p = m < static_cast<int64_t>(want.size()) ? want[m] : -1;
        const int32_t slot =
            p < 0 ? -1
                  : static_cast<int32_t>(table[i * bt_stride + p / c.page_size] * c.page_size +
                                         p % c.page_size);
        ASSERT_EQ(positions[r * c.k + m], p)
            << "k " << c.k << " len " << c.lens[i] << " row " << r << " output " << m;
        ASSERT_EQ(indices[r * c.k + m], slot) << "row " << r << " output " << m;
      }
    }
  }
}

TEST(OpsTopk, EdgeLengthsAgainstStableSort) {
  Rng rng(case_seed());
  for (const int k : {1, 7, 64}) {
    const std::vector<int32_t> lens = {0, 1, k - 1, k, k + 1, 3 * k + 5, 1000};
    for (const bool ties : {false, true}) {
      run_topk_case({.k = k, .next_n = 1, .page_size = 16, .lens = lens, .ties = ties}, rng);
    }
  }
}

TEST(OpsTopk, CausalRowsAndPageSizes) {
  Rng rng(case_seed());
  for (const int page_size : {1, 64}) {
    for (const int next_n : {2, 4}) {
      run_topk_case({.k = 16,
                     .next_n = next_n,
                     .page_size = page_size,
                     .lens = {0, 2, 16, 17, 18, 500},
                     .ties = true},
                    rng);
    }
  }
  run_topk_case(
      {.k = 2048, .next_n = 1, .page_size = 64, .lens = {2047, 2048, 2049, 20000}, .ties = false},
      rng);
}

TEST(OpsTopk, RefusesBadArguments) {
  std::vector<float> logits(10);
  std::vector<int32_t> lens = {11}, table = {0}, indices(4);
  ops::TopkArgs a;
  a.batch = 1;
  a.k = 4;
  a.logits = logits.data();
  a.max_len = 10;
  a.seq_lens = lens.data();
  a.block_table = table.data();
  a.block_table_stride = 1;
  a.page_size = 16;
  a.indices = indices.data();
  Status s = ops::topk_indices(Device::kCpu, a);
  EXPECT_NE(s.message().find("seq_lens[0]: expected 0..10, given 11"), std::string::npos)
      << s.message();
  lens[0] = 10;
  table[0] = -3;
  s = ops::topk_indices(Device::kCpu, a);
  EXPECT_NE(s.message().find("block_table[0, 0]"), std::string::npos) << s.message();
  a.k = 0;
  s = ops::topk_indices(Device::kCpu, a);
  EXPECT_NE(s.message().find("k: expected 1..65536, given 0"), std::string::npos) << s.message();
  a.k = 4;
  a.page_size = 4;
  s = ops::topk_indices(Device::kCpu, a);
  EXPECT_NE(s.message().find("block_table_stride: expected 3.."), std::string::npos) << s.message();
}

}  // namespace
}  // namespace mlakit_test
