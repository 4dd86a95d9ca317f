#include "naive_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

namespace mlakit_test {
namespace {

using mlakit::DType;
using mlakit::KvLayout;

constexpr int kDqk = 576;  // spelled out here too: the reference follows DESIGN.md, not the headers
constexpr int kDv = 512;
constexpr int kBlockwiseTokenBytes = 656;  // 512 e4m3, 4 float32 scales, 64 bf16
// DeepSeek V4: d_qk 512 = 448 e4m3 NoPE + 64 bf16 RoPE (576 data bytes a token, all first in the
// page), then an 8-byte scale row a token (7 UE8M0 exponents, one per 64 NoPE values, 1 pad byte),
// the page padded to a multiple of 576 bytes.
constexpr int kV4Dqk = 512;
constexpr int kV4DataBytes = 576;
constexpr int kV4ScaleRowBytes = 8;

int d_qk_of(const mlakit::Problem& p) { return p.kv_layout == KvLayout::kFp8V4 ? kV4Dqk : kDqk; }

int64_t v4_page_bytes(int page_size) {
  const int64_t raw = static_cast<int64_t>(page_size) * (kV4DataBytes + kV4ScaleRowBytes);
  return (raw + 575) / 576 * 576;
}

// UE8M0: 2^(e - 127), 255 is NaN.
double decode_ue8m0(uint8_t e) {
  return e == 255 ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, e - 127);
}

// A cache as the reference reads it: its bytes and its page size.
struct Cache {
  const uint8_t* data;
  int page_size;
};

double decode(const uint8_t* base, int64_t index, DType dtype) {
  switch (dtype) {
    case DType::kBF16:
    case DType::kFP16: {
      uint16_t bits;
      std::memcpy(&bits, base + 2 * index, sizeof(bits));
      return dtype == DType::kBF16 ? decode_bf16(bits) : decode_fp16(bits);
    }
    case DType::kFP8E4M3: return decode_e4m3(base[index]);
    case DType::kFP32: {
      float f;
      std::memcpy(&f, base + 4 * index, sizeof(f));
      return f;
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// Cached token `slot` (page * page_size + offset) of `cache` as d_qk doubles. k_scale dequantizes
// the fp8 values: all 576 of a dense fp8 token, the 512 (blockwise) or 448 (V4) e4m3 values on top
// of their group scales; the RoPE part of those layouts is stored in bf16 and is not scaled.
std::vector<double> load_token(const mlakit::harness::HostInputs& in, const Cache& cache,
                               int64_t slot, double k_scale) {
  const mlakit::Problem& p = in.problem;
  if (p.kv_layout == KvLayout::kFp8V4) {
    std::vector<double> row(kV4Dqk);
    const int64_t page = slot / cache.page_size, offset = slot % cache.page_size;
    const uint8_t* page_base = cache.data + page * v4_page_bytes(cache.page_size);
    const uint8_t* data = page_base + offset * kV4DataBytes;
    const uint8_t* scales =
        page_base + int64_t{cache.page_size} * kV4DataBytes + offset * kV4ScaleRowBytes;
    for (int d = 0; d < 448; ++d)
      row[d] = decode_e4m3(data[d]) * decode_ue8m0(scales[d / 64]) * k_scale;
    for (int d = 0; d < 64; ++d) {
      uint16_t bits;
      std::memcpy(&bits, data + 448 + 2 * d, sizeof(bits));
      row[448 + d] = decode_bf16(bits);
    }
    return row;
  }
  std::vector<double> row(kDqk);
  if (p.kv_layout == KvLayout::kFp8Blockwise) {
    const uint8_t* token = cache.data + slot * kBlockwiseTokenBytes;
    float scales[4];
    std::memcpy(scales, token + 512, sizeof(scales));
    for (int d = 0; d < 512; ++d) row[d] = decode_e4m3(token[d]) * scales[d / 128] * k_scale;
    for (int d = 0; d < 64; ++d) {
      uint16_t bits;
      std::memcpy(&bits, token + 528 + 2 * d, sizeof(bits));
      row[512 + d] = decode_bf16(bits);
    }
    return row;
  }
  for (int d = 0; d < kDqk; ++d) row[d] = decode(cache.data, slot * kDqk + d, p.kv_dtype) * k_scale;
  return row;
}

// The listed slots of one index row that count: the first `lens[i]` (when given), not -1.
void add_listed(const int32_t* row, int64_t topk, const std::vector<int32_t>& lens, int i,
                const Cache& cache, std::vector<std::pair<Cache, int64_t>>* out) {
  int64_t listed = topk;
  if (!lens.empty()) listed = std::min<int64_t>(listed, lens[i]);
  for (int64_t k = 0; k < listed; ++k) {
    if (row[k] >= 0) out->emplace_back(cache, row[k]);
  }
}

// The cached tokens query token t of request i attends to, in order: with sparse indices, the
// main cache's listed slots and then the extra cache's, in one list (one softmax over both).
std::vector<std::pair<Cache, int64_t>> visible_tokens(const mlakit::harness::HostInputs& in, int i,
                                                      int t) {
  const mlakit::Problem& p = in.problem;
  std::vector<std::pair<Cache, int64_t>> tokens;
  const Cache main{in.kv.data(), p.page_size};
  const int64_t row = static_cast<int64_t>(i) * p.s_q + t;
  if (p.topk > 0) {
    add_listed(&in.indices[row * p.topk], p.topk, in.topk_lens, i, main, &tokens);
    if (p.extra_topk > 0) {
      const Cache extra{in.extra_kv.data(),
                        p.extra_page_size > 0 ? p.extra_page_size : p.page_size};
      add_listed(&in.extra_indices[row * p.extra_topk], p.extra_topk, in.extra_topk_lens, i, extra,
                 &tokens);
    }
    return tokens;
  }
  const int64_t len = in.seq_lens[i];
  int64_t visible = len;
  if (p.s_q > 1 && p.causal) visible = std::max<int64_t>(0, len - p.s_q + 1 + t);
  for (int64_t j = 0; j < visible; ++j) {
    const int64_t page = in.block_table[i * in.block_table_stride + j / p.page_size];
    tokens.emplace_back(main, page * p.page_size + j % p.page_size);
  }
  return tokens;
}

}  // namespace

double decode_bf16(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof(f));
  return f;
}

double decode_fp16(uint16_t bits) {
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0x1f) {
    return mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                         : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

double decode_e4m3(uint8_t bits) {
  const double sign = (bits & 0x80) ? -1.0 : 1.0;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  if ((bits & 0x7f) == 0x7f) return std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(mantissa, -9);
  return sign * std::ldexp(8 + mantissa, exponent - 10);
}

NaiveResult naive_attention(const mlakit::harness::HostInputs& in) {
  const mlakit::Problem& p = in.problem;
  const double q_scale = p.q_dtype == DType::kFP8E4M3 ? in.q_scale : 1.0;
  const double k_scale = std::isnan(in.k_scale) ? 1.0 : in.k_scale;
  const double softmax_scale = in.softmax_scale;
  const double inf = std::numeric_limits<double>::infinity();

  NaiveResult r;
  const int64_t rows = static_cast<int64_t>(in.batch) * p.s_q * p.h_q;
  r.out.assign(rows * kDv, 0.0);
  r.lse.assign(rows, -inf);
  r.visible.assign(static_cast<size_t>(in.batch) * p.s_q, 0);

  for (int i = 0; i < in.batch; ++i) {
    for (int t = 0; t < p.s_q; ++t) {
      // Gather first: plain float64 rows of the visible tokens.
      std::vector<std::vector<double>> kv;
      for (const auto& [cache, slot] : visible_tokens(in, i, t))
        kv.push_back(load_token(in, cache, slot, k_scale));
      const int64_t n = static_cast<int64_t>(kv.size());
      r.visible[static_cast<size_t>(i) * p.s_q + t] = static_cast<int>(n);

      for (int h = 0; h < p.h_q; ++h) {
        const int64_t row = (static_cast<int64_t>(i) * p.s_q + t) * p.h_q + h;
        if (n == 0) continue;  // out 0, lse -inf
        const int d_qk = d_qk_of(p);
        std::vector<double> q(d_qk);
        for (int d = 0; d < d_qk; ++d)
          q[d] = decode(in.q.data(), row * d_qk + d, p.q_dtype) * q_scale;

        std::vector<double> s(n);
        double s_max = -inf;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int d = 0; d < d_qk; ++d) dot += q[d] * kv[j][d];
          s[j] = softmax_scale * dot;
          s_max = std::max(s_max, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += std::exp(s[j] - s_max);
        const double lse = s_max + std::log(sum);
        // The sink adds exp(sink) to the softmax denominator; it leaves the lse alone.
        const double sink_factor =
            p.has_sinks ? 1.0 / (1.0 + std::exp(static_cast<double>(in.sinks[h]) - lse)) : 1.0;
        double* out = &r.out[row * kDv];
        for (int64_t j = 0; j < n; ++j) {
          const double weight = std::exp(s[j] - lse) * sink_factor;
          for (int d = 0; d < kDv; ++d) out[d] += weight * kv[j][d];
        }
        r.lse[row] = lse;
      }
    }
  }
  return r;
}

}  // namespace mlakit_test
