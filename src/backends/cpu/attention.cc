// The cpu reference backend: exact MLA decode math on the host.
//
// Per request, the visible tokens are dequantized once to float32 rows of d_qk; query rows are
// processed in blocks of up to kHeadBlock heads of one token so that each cached row is reused
// from cache for several heads. Scores and outputs are accumulated in float32, the softmax
// normalizer in float64, and the softmax is exact two-pass (max first), so the result is the
// reference the GPU kernels are checked against.
#include "backends/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/data_check.h"
#include "core/numeric.h"
#include "core/parallel.h"
#include "core/views.h"
#include "mlakit/cp.h"

namespace mlakit::cpu {
namespace {

constexpr int kHeadBlock = 8;

float load_scalar(const void* base, int64_t index, DType dtype) {
  switch (dtype) {
    case DType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::kFP16: return fp16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::kFP8E4M3: return e4m3_to_float(static_cast<const uint8_t*>(base)[index]);
    case DType::kFP32: return static_cast<const float*>(base)[index];
  }
  return NAN;
}

void store_scalar(void* base, int64_t index, DType dtype, float value) {
  if (dtype == DType::kBF16) {
    static_cast<uint16_t*>(base)[index] = float_to_bf16(value);
  } else {
    static_cast<uint16_t*>(base)[index] = float_to_fp16(value);
  }
}

// A cached token of the main or the extra cache: its row (576 elements, 656 bytes blockwise, or
// V4's 576 data bytes) and, in the V4 layout, its scale row.
struct TokenRef {
  const uint8_t* row;
  const uint8_t* scales;  // kFp8V4 only
};

// Where a cache's tokens lie: pages page_bytes apart, tokens token_bytes apart in a page (a view
// of the main cache; the extra cache and any V4 cache are contiguous).
struct CacheView {
  const uint8_t* base;
  int32_t page_size;
  int64_t page_bytes;
  int64_t token_bytes;
};

TokenRef token_ref(const Problem& p, const CacheView& c, int64_t slot) {
  const uint8_t* page = c.base + slot / c.page_size * c.page_bytes;
  const int64_t offset = slot % c.page_size;
  // V4: the page's data rows first, its scale rows after them.
  const bool v4 = p.kv_layout == KvLayout::kFp8V4;
  return {
      .row = page + offset * c.token_bytes,
      .scales = v4 ? page + int64_t{c.page_size} * kV4DataBytes + offset * kV4ScaleBytes : nullptr};
}

float load_bf16(const uint8_t* at) {
  uint16_t bits;
  std::memcpy(&bits, at, sizeof(bits));
  return bf16_to_float(bits);
}

// Dequantizes cached token `t` into dst[0:d_qk].
void load_token(const Problem& p, float k_scale, const TokenRef& t, float* dst) {
  if (p.kv_layout == KvLayout::kFp8Blockwise) {
    const uint8_t* row = t.row;
    float scales[kDv / kBlockwiseGroup];
    std::memcpy(scales, row + kDv, sizeof(scales));
    for (int d = 0; d < kDv; ++d) {
      dst[d] = e4m3_to_float(row[d]) * scales[d / kBlockwiseGroup] * k_scale;
    }
    const uint8_t* rope = row + kDv + sizeof(scales);
    for (int d = 0; d < kDRope; ++d) dst[kDv + d] = load_bf16(rope + 2 * d);
    return;
  }
  if (p.kv_layout == KvLayout::kFp8V4) {
    const uint8_t* row = t.row;  // the scale row's pad byte is never read
    for (int d = 0; d < kV4Nope; ++d) {
      dst[d] = e4m3_to_float(row[d]) * ue8m0_to_float(t.scales[d / kV4Group]) * k_scale;
    }
    for (int d = 0; d < kDRope; ++d) dst[kV4Nope + d] = load_bf16(row + kV4Nope + 2 * d);
    return;
  }
  for (int d = 0; d < kDqk; ++d) dst[d] = load_scalar(t.row, d, p.kv_dtype) * k_scale;
}

// Number of cached tokens token t of a request of q_len query tokens (s_q, or its own with var_q)
// sees in this rank's cache (dense mode). seq_len is the global length; with context parallelism
// the bound is on global positions, and the visible ones of this rank are its first cp_local_len
// local positions (mlakit/cp.h).
int64_t visible_dense(const Problem& p, int64_t seq_len, int q_len, int t) {
  const int64_t global =
      q_len == 1 || !p.causal ? seq_len : std::clamp<int64_t>(seq_len - q_len + 1 + t, 0, seq_len);
  return cp_local_len(global, p.cp_world, p.cp_rank, p.cp_interleave);
}

int64_t listed(const int32_t* lens, int i, int64_t topk) {
  if (lens == nullptr) return topk;
  return std::clamp<int64_t>(lens[i], 0, topk);
}

// A query token: token t of request i, of the request's q_len, in packed row `row` of q, out,
// lse and the indices (i * s_q + t, or with var_q cu_seqlens_q[i] + t).
struct QueryToken {
  int i, t, q_len;
  int64_t row;
};

// Cache tokens a query token attends to, in order: the main cache's, then the extra cache's (one
// softmax over both).
void visible_tokens(const Problem& p, const RunArgs& a, const CacheView& main,
                    const CacheView& extra_cache, const QueryToken& qt,
                    std::vector<TokenRef>* tokens) {
  tokens->clear();
  const int i = qt.i;
  const int64_t row = qt.row;
  if (p.sparse()) {
    const int32_t* idx = a.indices + row * p.topk;
    const int64_t n = listed(a.topk_lens, i, p.topk);
    for (int64_t k = 0; k < n; ++k) {
      if (idx[k] >= 0) tokens->push_back(token_ref(p, main, idx[k]));
    }
    if (!p.has_extra()) return;
    const int32_t* extra = a.extra_indices + row * p.extra_topk;
    const int64_t m = listed(a.extra_topk_lens, i, p.extra_topk);
    for (int64_t k = 0; k < m; ++k) {
      if (extra[k] >= 0) {
        tokens->push_back(token_ref(p, extra_cache, extra[k]));
      }
    }
    return;
  }
  const int64_t n = visible_dense(p, a.seq_lens[i], qt.q_len, qt.t);
  const int32_t* pages = a.block_table + i * a.block_table_stride;
  for (int64_t j = 0; j < n; ++j) {
    tokens->push_back(token_ref(
        p, main, static_cast<int64_t>(pages[j / p.page_size]) * p.page_size + j % p.page_size));
  }
}

}  // namespace

uint64_t scratch_bytes(const Problem& p) {
  const uint64_t n =
      p.sparse() ? uint64_t{0} + p.topk + p.extra_topk : uint64_t(cp_local_max_seq_len(p));
  return n * (sizeof(TokenRef) + kHeadBlock * sizeof(float)) +
         kHeadBlock * (kDqk + kDv) * sizeof(float) + kDqk * sizeof(float) +
         kHeadBlock * (sizeof(double) + sizeof(float));
}

void attention(const Problem& p, const RunArgs& a, int threads) {
  const float q_scale = p.q_dtype != DType::kFP8E4M3 ? 1.0f
                        : a.q_scale_ptr != nullptr   ? *a.q_scale_ptr
                                                     : a.q_scale;
  const float k_scale = a.k_scale_ptr != nullptr ? *a.k_scale_ptr
                        : std::isnan(a.k_scale)  ? 1.0f
                                                 : a.k_scale;
  const Views v = views_of(p, a);
  // Bytes of a cache element: the blockwise and V4 strides count bytes.
  const int64_t kv_elem = p.kv_layout == KvLayout::kDense ? dtype_bytes(p.kv_dtype) : 1;
  const CacheView main{.base = static_cast<const uint8_t*>(a.kv_cache),
                       .page_size = p.page_size,
                       .page_bytes = v.kv_page * kv_elem,
                       .token_bytes = v.kv_token * kv_elem};
  const int32_t extra_page_size = p.extra_page_size_or_default();
  const CacheView extra{
      .base = static_cast<const uint8_t*>(a.extra_kv_cache),
      .page_size = extra_page_size,
      .page_bytes = static_cast<int64_t>(kv_page_bytes(p.kv_dtype, p.kv_layout, extra_page_size)),
      .token_bytes = Views::token_elems(p) * kv_elem};

  // Block b holds heads h0..h1 of token t of request i, b = (i * s_q + t) * head_blocks +
  // h0 / kHeadBlock: computed, not listed (a list took 4 GB at batch 2^20, s_q 16, h_q 128).
  const int head_blocks = (p.h_q + kHeadBlock - 1) / kHeadBlock;
  auto compute = [&](int64_t b) {
    const int h0 = static_cast<int>(b % head_blocks) * kHeadBlock;
    const int h1 = std::min(h0 + kHeadBlock, p.h_q);
    const int i = static_cast<int>(b / head_blocks / p.s_q);
    const int t = static_cast<int>(b / head_blocks % p.s_q);
    // var_q: request i's tokens past its own q_len have no row (nothing read or written).
    const int q_len = p.var_q ? a.cu_seqlens_q[i + 1] - a.cu_seqlens_q[i] : p.s_q;
    if (t >= q_len) return;
    const QueryToken qt{
        .i = i,
        .t = t,
        .q_len = q_len,
        .row = p.var_q ? int64_t{a.cu_seqlens_q[i]} + t : static_cast<int64_t>(i) * p.s_q + t};
    // The token index in q's and out's views (their request stride is 0 with var_q).
    const int64_t view_token = p.var_q ? qt.row : t;
    const int nh = h1 - h0;
    const int d_qk = p.d_qk;
    std::vector<TokenRef> tokens;
    visible_tokens(p, a, main, extra, qt, &tokens);
    const int64_t n = static_cast<int64_t>(tokens.size());

    // Queries of this block, dequantized and multiplied by the softmax scale.
    std::vector<float> q(static_cast<size_t>(nh) * d_qk);
    const int64_t q_row0 = qt.row * p.h_q + h0;
    for (int h = 0; h < nh; ++h) {
      const int64_t q_at = v.q_row(i, view_token, h0 + h);
      for (int d = 0; d < d_qk; ++d) {
        q[h * d_qk + d] = load_scalar(a.q, q_at + d, p.q_dtype) * q_scale;
      }
    }

    // Pass 1: scores. Pass 2: exp-weighted sum of values (V = the token's first 512 values).
    std::vector<float> kv(kDqk);
    std::vector<float> scores(static_cast<size_t>(nh) * n);
    for (int64_t j = 0; j < n; ++j) {
      load_token(p, k_scale, tokens[j], kv.data());
      for (int h = 0; h < nh; ++h) {
        const float* qh = &q[h * d_qk];
        float dot = 0.0f;
        for (int d = 0; d < d_qk; ++d) dot += qh[d] * kv[d];
        scores[h * n + j] = dot * a.softmax_scale;
      }
    }
    std::vector<float> acc(static_cast<size_t>(nh) * kDv, 0.0f);
    std::vector<double> denom(nh, 0.0);
    std::vector<float> row_max(nh, -std::numeric_limits<float>::infinity());
    for (int h = 0; h < nh; ++h) {
      for (int64_t j = 0; j < n; ++j) row_max[h] = std::max(row_max[h], scores[h * n + j]);
    }
    for (int64_t j = 0; j < n; ++j) {
      load_token(p, k_scale, tokens[j], kv.data());
      for (int h = 0; h < nh; ++h) {
        const float w = std::exp(scores[h * n + j] - row_max[h]);
        denom[h] += w;
        float* acc_h = &acc[h * kDv];
        for (int d = 0; d < kDv; ++d) acc_h[d] += w * kv[d];
      }
    }

    for (int h = 0; h < nh; ++h) {
      const int64_t row = q_row0 + h;
      float lse = -std::numeric_limits<float>::infinity();
      float out_scale = 0.0f;  // no visible token: out 0, lse -inf
      if (n > 0) {
        lse = row_max[h] + static_cast<float>(std::log(denom[h]));
        out_scale = static_cast<float>(1.0 / denom[h]);
        if (p.has_sinks) {
          // out *= exp(lse) / (exp(lse) + exp(sink)) = 1 / (1 + exp(sink - lse))
          out_scale /= 1.0f + std::exp(a.sinks[h0 + h] - lse);
        }
      }
      const int64_t out_at = v.out_row(i, view_token, h0 + h);
      for (int d = 0; d < kDv; ++d) {
        store_scalar(a.out, out_at + d, p.out_dtype, acc[h * kDv + d] * out_scale);
      }
      // Base 2 (Problem::lse_base2) at the store only: the sink above takes the natural LSE.
      if (p.return_lse) a.lse[row] = p.lse_base2 ? lse * kLog2e : lse;
    }
  };
  parallel_for(static_cast<int64_t>(a.batch) * p.s_q * head_blocks, compute, threads);
}

}  // namespace mlakit::cpu
