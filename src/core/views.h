// The strides of q, out and the KV cache with RunArgs' 0 ("contiguous") resolved, for validation
// and the backends. Strides are in elements of each tensor's dtype (bytes for the fp8 blockwise
// and V4 caches). A kFp8V4 cache takes no view (validation refuses its kv strides): its kv_page is
// kv_page_bytes and its kv_token the 576 data bytes of a token, the scale rows after them.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/check.h"
#include "mlakit/mlakit.h"

namespace mlakit {

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
  bool q_uniform(const Problem& p) const { return q_s == p.h_q * q_h && q_b == p.s_q * q_s; }
  bool out_uniform(const Problem& p) const {
    return out_s == p.h_q * out_h && out_b == p.s_q * out_s;
  }
  // Cached tokens equally spaced across pages: a 2-D [num_pages * page_size, token] view.
  bool kv_uniform(const Problem& p) const { return kv_page == p.page_size * kv_token; }

  bool q_contiguous(const Problem& p) const { return q_uniform(p) && q_h == p.d_qk; }
  bool kv_contiguous(const Problem& p) const {
    return kv_page == page_elems(p) && kv_token == token_elems(p);
  }
  bool out_contiguous(const Problem& p) const { return out_uniform(p) && out_h == kDv; }

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
  v.q_b = pick(a.q_stride_b, int64_t{p.s_q} * p.h_q * p.d_qk);
  v.kv_token = pick(a.kv_stride_token, Views::token_elems(p));
  v.kv_page = pick(a.kv_stride_page, Views::page_elems(p));
  v.out_h = pick(a.out_stride_h, kDv);
  v.out_s = pick(a.out_stride_s, int64_t{p.h_q} * kDv);
  v.out_b = pick(a.out_stride_b, int64_t{p.s_q} * p.h_q * kDv);
  return v;
}

// What views a GPU backend reads: `rows` means one row stride (rows equally spaced, any multiple
// of 16 bytes apart), otherwise only the contiguous tensor.
struct ViewSupport {
  bool q_rows = false;
  bool kv_rows = false;
  bool out_rows = false;
};

// kUnsupported naming the first of q, kv_cache and out whose view `backend` cannot read, with its
// strides; Ok when it reads all three.
inline Status check_backend_views(const Problem& p, const RunArgs& a, std::string_view backend,
                                  ViewSupport support) {
  const Views v = views_of(p, a);
  auto refuse = [&](std::string_view name, bool rows, auto... strides) {
    return unsupported(name, ": backend ", backend, " reads ",
                       rows ? "rows equally spaced (one row stride)" : "a contiguous tensor",
                       ", given strides [", strides...,
                       "] in elements (the cpu backend takes any "
                       "view with a contiguous last dimension)");
  };
  if (!(support.q_rows ? v.q_uniform(p) : v.q_contiguous(p))) {
    return refuse("q", support.q_rows, v.q_b, ", ", v.q_s, ", ", v.q_h, ", 1");
  }
  if (!(support.kv_rows ? v.kv_uniform(p) : v.kv_contiguous(p))) {
    return refuse("kv_cache", support.kv_rows, v.kv_page, ", ", v.kv_token, ", 1");
  }
  if (!(support.out_rows ? v.out_uniform(p) : v.out_contiguous(p))) {
    return refuse("out", support.out_rows, v.out_b, ", ", v.out_s, ", ", v.out_h, ", 1");
  }
  return Status::Ok();
}

}  // namespace mlakit
