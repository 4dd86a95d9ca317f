#include "naive_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace mlakit_test {
namespace {

using mlakit::DType;
using mlakit::KvLayout;

constexpr int kDqk = 576;  // spelled out here too: the reference follows DESIGN.md, not the headers
constexpr int kDv = 512;
constexpr int kBlockwiseTokenBytes = 656;  // 512 e4m3, 4 float32 scales, 64 bf16

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

// Cached token `slot` (page * page_size + offset) as 576 doubles. k_scale dequantizes the fp8
// values: all 576 of a dense fp8 token, the 512 e4m3 values of a blockwise one (on top of their
// group scales); the blockwise RoPE part is stored in bf16 and is not scaled.
std::vector<double> load_token(const mlakit::harness::HostInputs& in, int64_t slot,
                               double k_scale) {
  const mlakit::Problem& p = in.problem;
  std::vector<double> row(kDqk);
  if (p.kv_layout == KvLayout::kFp8Blockwise) {
    const uint8_t* token = in.kv.data() + slot * kBlockwiseTokenBytes;
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
  for (int d = 0; d < kDqk; ++d)
    row[d] = decode(in.kv.data(), slot * kDqk + d, p.kv_dtype) * k_scale;
  return row;
}

// The cache slots query token t of request i attends to, in order.
std::vector<int64_t> visible_slots(const mlakit::harness::HostInputs& in, int i, int t) {
  const mlakit::Problem& p = in.problem;
  std::vector<int64_t> slots;
  if (p.topk > 0) {
    int64_t listed = p.topk;
    if (!in.topk_lens.empty()) listed = std::min<int64_t>(listed, in.topk_lens[i]);
    for (int64_t k = 0; k < listed; ++k) {
      const int32_t slot = in.indices[(static_cast<int64_t>(i) * p.s_q + t) * p.topk + k];
      if (slot >= 0) slots.push_back(slot);
    }
    return slots;
  }
  const int64_t len = in.seq_lens[i];
  int64_t visible = len;
  if (p.s_q > 1 && p.causal) visible = std::max<int64_t>(0, len - p.s_q + 1 + t);
  for (int64_t j = 0; j < visible; ++j) {
    const int64_t page = in.block_table[i * in.block_table_stride + j / p.page_size];
    slots.push_back(page * p.page_size + j % p.page_size);
  }
  return slots;
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
      for (const int64_t slot : visible_slots(in, i, t))
        kv.push_back(load_token(in, slot, k_scale));
      const int64_t n = static_cast<int64_t>(kv.size());
      r.visible[static_cast<size_t>(i) * p.s_q + t] = static_cast<int>(n);

      for (int h = 0; h < p.h_q; ++h) {
        const int64_t row = (static_cast<int64_t>(i) * p.s_q + t) * p.h_q + h;
        if (n == 0) continue;  // out 0, lse -inf
        std::vector<double> q(kDqk);
        for (int d = 0; d < kDqk; ++d)
          q[d] = decode(in.q.data(), row * kDqk + d, p.q_dtype) * q_scale;

        std::vector<double> s(n);
        double s_max = -inf;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int d = 0; d < kDqk; ++d) dot += q[d] * kv[j][d];
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
