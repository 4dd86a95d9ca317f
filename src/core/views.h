// The strides of q, out and the KV cache with RunArgs' 0 ("contiguous") resolved, for validation
// and the backends (every backend takes every view validation accepts; how the GPU ones read
// them: plan/decode_params.h, backends/sm90/launch.cc). Strides are in elements of each tensor's
// dtype (bytes for the fp8 blockwise and V4 caches). A kFp8V4 cache takes no view (validation
// refuses its kv strides): its kv_page is kv_page_bytes and its kv_token the 576 data bytes of a
// token, the scale rows after them.
#pragma once

#include <cstdint>

#include "mlakit/mlakit.h"

namespace mlakit {

// With Problem::var_q, q and out are packed by query token ([total, h_q, ...]): q_b and out_b are
// 0 and a row's token index is its packed row cu_seqlens_q[i] + t (q_row(i, cu[i] + t, h)).
struct Views {
  int64_t q_b, q_s, q_h;        // q [b, s_q, h_q, d_qk]
  int64_t kv_page, kv_token;    // kv_cache [num_pages, page_size, token]
  int64_t out_b, out_s, out_h;  // out [b, s_q, h_q, 512]

  // Elements of one cached token's row: 576, 656 bytes in the blockwise layout, or the 576 data
  // bytes of a V4 token (its scale row lies after the page's data).
  static int64_t token_elems(const Problem& p) {
    switch (p.kv_layout) {
      case KvLayout::kFp8Blockwise: return kBlockwiseBytes;
      case KvLayout::kFp8V4: return kV4DataBytes;
      default: return kDqk;
    }
  }
  // Elements between pages of the contiguous cache.
  static int64_t page_elems(const Problem& p) {
    return p.kv_layout == KvLayout::kFp8V4
               ? static_cast<int64_t>(kv_page_bytes(p.kv_dtype, p.kv_layout, p.page_size))
               : int64_t{p.page_size} * token_elems(p);
  }

  // q's rows (one per request, token and head) equally spaced, q_h apart: a 2-D [rows, d_qk] view.
  // Never with var_q: the kernels' padded rows [b, s_q] are not the packed ones.
  bool q_uniform(const Problem& p) const {
    return !p.var_q && q_s == p.h_q * q_h && q_b == p.s_q * q_s;
  }
  // Cached tokens equally spaced across pages: a 2-D [num_pages * page_size, token] view.
  bool kv_uniform(const Problem& p) const { return kv_page == p.page_size * kv_token; }

  // Element offsets of a q / out row and of cache slot page * page_size + offset.
  int64_t q_row(int64_t i, int64_t t, int64_t h) const { return i * q_b + t * q_s + h * q_h; }
  int64_t out_row(int64_t i, int64_t t, int64_t h) const {
    return i * out_b + t * out_s + h * out_h;
  }
  int64_t kv_slot(int64_t slot, int32_t page_size) const {
    return slot / page_size * kv_page + slot % page_size * kv_token;
  }
};

inline Views views_of(const Problem& p, const RunArgs& a) {
  auto pick = [](int64_t given, int64_t contiguous) { return given != 0 ? given : contiguous; };
  Views v{};
  v.q_h = pick(a.q_stride_h, p.d_qk);
  v.q_s = pick(a.q_stride_s, int64_t{p.h_q} * p.d_qk);
  v.q_b = p.var_q ? 0 : pick(a.q_stride_b, int64_t{p.s_q} * p.h_q * p.d_qk);
  v.kv_token = pick(a.kv_stride_token, Views::token_elems(p));
  v.kv_page = pick(a.kv_stride_page, Views::page_elems(p));
  v.out_h = pick(a.out_stride_h, kDv);
  v.out_s = pick(a.out_stride_s, int64_t{p.h_q} * kDv);
  v.out_b = p.var_q ? 0 : pick(a.out_stride_b, int64_t{p.s_q} * p.h_q * kDv);
  return v;
}

}  // namespace mlakit
