// The parameters every decode kernel takes from RunArgs and Problem, whatever its backend: inputs
// and outputs other than q and the cache, the plan's view of the workspace and the plan shape.
// A backend's DecodeParams derives from it and adds how it reads q and the cache (pointers and
// views for sm80, TMA tensor maps for sm90) and its own settings; part_for_cta and the combine
// kernel read only these fields.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "core/numeric.h"
#include "core/views.h"
#include "mlakit/mlakit.h"
#include "plan/plan.h"

namespace mlakit::plan {

// A view of q or out (RunArgs, "Views") as the kernels number its rows: row r of request
// `request` is query token r / h_q, head r % h_q. A sparse problem runs its (request, token)
// pairs as requests of one token (rows_as_requests): there `request_tokens` (the problem's s_q)
// splits the kernels' request back into (request / s_q, request % s_q); else it is 1. Strides in
// elements; the offsets are 64-bit (a view's strides reach 2^40).
// Problem::var_q: q and out are packed by query token. Token t of request i is packed row
// cu_seqlens_q[i] + t (its offset that times stride_s), and only the first q_len_i tokens of a
// request exist: the kernels' rows r < live_rows(request) (rows are token-major, so the absent ones
// are a suffix). The kernels still run the padded [b, s_q] rows; they read no q row and write no
// out or lse row past live_rows (q loads fill zeros there).
struct RowView {
  int64_t stride_b, stride_s, stride_h;
  int32_t h_q;
  int32_t request_tokens;
  // > 0 when the rows are equally spaced (stride_s = h_q * stride_h unless s_q is 1, stride_b =
  // s_q * h_q * stride_h; the contiguous tensor among them) and there is no var_q: the kernels'
  // request then has this many rows, one stride_h apart, and offset() is one multiply-add instead
  // of the general case's divisions by h_q and s_q for every row the epilogues write.
  int32_t uniform_rows;
  const int32_t* cu_seqlens_q;  // [b + 1] with var_q (device memory), else null

  // The problem's request i and the query token the kernels' request starts at.
  __host__ __device__ __forceinline__ void request_token(int32_t request, int32_t* i,
                                                         int32_t* t0) const {
    *i = request;
    *t0 = 0;
    if (request_tokens > 1) {
      *i = request / request_tokens;
      *t0 = request - *i * request_tokens;
    }
  }
  __host__ __device__ __forceinline__ int64_t offset(int32_t request, int32_t r) const {
    if (uniform_rows > 0) return (int64_t{request} * uniform_rows + r) * stride_h;
    int32_t t = r / h_q;
    const int32_t h = r - t * h_q;
    int32_t i, t0;
    request_token(request, &i, &t0);
    t += t0;
    if (cu_seqlens_q != nullptr) return (int64_t{cu_seqlens_q[i]} + t) * stride_s + h * stride_h;
    return i * stride_b + t * stride_s + h * stride_h;
  }
  // The rows of the kernels' request (of `rows`) that exist: all but with var_q.
  __host__ __device__ __forceinline__ int32_t live_rows(int32_t request, int32_t rows) const {
    if (cu_seqlens_q == nullptr) return rows;
    int32_t i, t0;
    request_token(request, &i, &t0);
    // In 64 bits: offsets the GPU trusts may be anything (q_len is clamped to 0..s_q, as the
    // lengths kernel does; rows covers at most s_q tokens).
    const int64_t live = (int64_t{cu_seqlens_q[i + 1]} - cu_seqlens_q[i] - t0) * h_q;
    return live < 0 ? 0 : live < rows ? static_cast<int32_t>(live) : rows;
  }
  // The element of the contiguous lse ([b, s_q, h_q], or with var_q [total, h_q]) of row r.
  __host__ __device__ __forceinline__ int64_t lse_index(int32_t request, int32_t r,
                                                        int32_t rows) const {
    if (cu_seqlens_q == nullptr) return int64_t{request} * rows + r;
    int32_t i, t0;
    request_token(request, &i, &t0);
    return (int64_t{cu_seqlens_q[i]} + t0) * h_q + r;
  }
};

// q's or out's view for the kernels' rows of `p` (the problem as given, not as planned);
// cu_seqlens_q: RunArgs' (null without var_q).
inline RowView row_view(const Problem& p, int64_t stride_b, int64_t stride_s, int64_t stride_h,
                        const int32_t* cu_seqlens_q) {
  // (stride_s matters only with several query tokens.)
  const bool uniform = !p.var_q && (p.s_q == 1 || stride_s == p.h_q * stride_h) &&
                       stride_b == int64_t{p.s_q} * p.h_q * stride_h;
  return {.stride_b = stride_b,
          .stride_s = stride_s,
          .stride_h = stride_h,
          .h_q = p.h_q,
          .request_tokens = p.sparse() ? p.s_q : 1,
          .uniform_rows = !uniform     ? 0
                          : p.sparse() ? p.h_q
                                       : p.s_q * p.h_q,
          .cu_seqlens_q = p.var_q ? cu_seqlens_q : nullptr};
}

// The cache's view as the kernels address it: the token at (page, offset) lies at page *
// stride_page + offset * stride_token (in elements or bytes, as the backend reads it). A sparse
// problem's kernels see the compacted token slots as pages of one token (offset 0): for a cache
// whose tokens are equally spaced (kv_page = page_size * kv_token) stride_page is then the token
// stride and slot_page_size 0; for padded pages slot_page_size is the page size, and a slot s is
// split into (s / page_size, s % page_size) first.
struct KvView {
  int64_t stride_page, stride_token;
  int32_t slot_page_size;

  __host__ __device__ __forceinline__ int64_t offset(int32_t page, int32_t token) const {
    if (slot_page_size > 0) {
      const uint32_t slot = static_cast<uint32_t>(page);
      page = static_cast<int32_t>(slot / static_cast<uint32_t>(slot_page_size));
      token = static_cast<int32_t>(slot - static_cast<uint32_t>(page) * slot_page_size);
    }
    return page * stride_page + token * stride_token;
  }
};

// The cache's view of `p` (as given) in units of `unit` bytes per stride element (1: the views'
// own elements; the element size: bytes). Sparse: over slots, as above.
inline KvView kv_view(const Problem& p, const Views& v, int64_t unit) {
  const int64_t page = v.kv_page * unit, token = v.kv_token * unit;
  if (!p.sparse()) return {.stride_page = page, .stride_token = token, .slot_page_size = 0};
  if (v.kv_uniform(p)) return {.stride_page = token, .stride_token = token, .slot_page_size = 0};
  return {.stride_page = page, .stride_token = token, .slot_page_size = p.page_size};
}

// A V4 cache as the sparse kernels read it (sm90's gather, sm80's loader): slot s (plan/compact.h,
// page pitch 2^page_shift) is token s & (2^page_shift - 1) of page s >> page_shift; its 576 data
// bytes at base + page * page_stride + token * 576, its 8 scale bytes at that page's +
// scale_offset + token * 8.
struct V4Cache {
  const uint8_t* base;
  int64_t page_stride;  // bytes
  int32_t page_shift;
  int32_t scale_offset;  // page_size * 576
};

// The V4Cache of a contiguous [num_pages, kv_page_bytes] cache (validation refuses V4 views) read
// through slots spaced by `pitch` (a power of two) tokens a page.
inline V4Cache v4_cache(const void* base, int32_t page_size, int32_t pitch) {
  return {.base = static_cast<const uint8_t*>(base),
          .page_stride =
              static_cast<int64_t>(kv_page_bytes(DType::kFP8E4M3, KvLayout::kFp8V4, page_size)),
          .page_shift = std::countr_zero(static_cast<uint32_t>(pitch)),
          .scale_offset = page_size * kV4DataBytes};
}

// A block-table entry as the kernels use it: the page id when it names a page of the cache, else -1
// (nothing of it is read).
// MLAKIT_NO_PAGE_CHECKS (a compile definition for measuring what the checks cost, never for use:
// bench/results/*-page-mask) trusts every id, here and in page_mask.cuh.
__host__ __device__ inline int32_t valid_page(int32_t id, int32_t num_pages) {
#ifdef MLAKIT_NO_PAGE_CHECKS
  (void)num_pages;
  return id;
#else
  return id >= 0 && id < num_pages ? id : -1;
#endif
}

struct DecodeParamsBase {
  const int32_t* block_table;  // [b, block_table_stride] page ids
  int64_t block_table_stride;  // elements between rows of block_table
  const float* sinks;          // [h_q] or nullptr
  void* out;                   // [b, s_q, h_q, 512] of T, a view: out_view
  float* lse;                  // [b, s_q, h_q] or nullptr (contiguous)
  RowView out_view;            // where the kernels' rows of out lie
  // What the written lse is per natural-log unit: 1, or log2(e) with Problem::lse_base2. Applied
  // at the final store only (the partials in the workspace stay natural).
  float lse_scale;
  PlanView plan;  // metadata and partials in the workspace
  Schedule schedule;
  const int32_t* seq_lens;    // [b]; with context parallelism the rank's (cp_lengths.h)
  int32_t max_len;            // lengths are clamped to [0, max_len]
  int32_t inline_plan;        // 1: persistent, each CTA plans its part (plan/part_plan.cuh)
  int32_t fixed_cost_blocks;  // inline_plan: the plan shape's partition constants
  int32_t min_chunk_blocks;
  int32_t batch;
  int32_t h_q;
  int32_t s_q;
  int32_t rows;        // s_q * h_q
  int32_t page_shift;  // log2(page_size): page sizes are powers of two
  // Pages in the cache (at most INT32_MAX): a block-table id outside [0, num_pages) is never read
  // (its copies fill zeros: valid_page) and its tokens are masked (page_mask.cuh).
  int32_t num_pages;
  int32_t causal;  // 1 when s_q > 1 and causal: token t sees positions < L - s_q + 1 + t
  // Context parallelism with causal MTP: [b, s_q] the tokens of this rank that token t sees
  // (cp_lengths.h), not derivable from the local length; else null.
  const int32_t* causal_bounds;
  float scale_log2;  // softmax_scale * log2(e)
  // fp8 dequantization scales (fp8/read_scales): a device pointer to one float, read at run time,
  // or else the host value (1 for 16-bit inputs).
  const float* q_scale_ptr;
  const float* k_scale_ptr;
  float q_scale;
  float k_scale;
};

// p: the problem as the plan sees it (planned, rows_as_requests); given: as the caller gave it
// (its views and LSE base).
inline DecodeParamsBase decode_params_base(const Problem& p, const Problem& given, const RunArgs& a,
                                           const PlanShape& shape, const PlanView& view,
                                           bool inline_plan) {
  const Views v = views_of(given, a);
  return DecodeParamsBase{
      .block_table = a.block_table,
      .block_table_stride = a.block_table_stride,
      .sinks = p.has_sinks ? a.sinks : nullptr,
      .out = a.out,
      .lse = p.return_lse ? a.lse : nullptr,
      .out_view = row_view(given, v.out_b, v.out_s, v.out_h, a.cu_seqlens_q),
      .lse_scale = given.lse_base2 ? kLog2e : 1.0f,
      .plan = view,
      .schedule = shape.schedule,
      .seq_lens = a.seq_lens,
      // Lengths past what the block table can address are clamped: the kernels never read past.
      // (With context parallelism p.max_seq_len is the rank's longest: rows_as_requests.)
      .max_len = static_cast<int32_t>(
          std::min<int64_t>(p.max_seq_len, a.block_table_stride * p.page_size)),
      .inline_plan = inline_plan ? 1 : 0,
      .fixed_cost_blocks = shape.fixed_cost_blocks,
      .min_chunk_blocks = shape.min_chunk_blocks,
      .batch = a.batch,
      .h_q = p.h_q,
      .s_q = p.s_q,
      .rows = shape.rows,
      .page_shift = std::countr_zero(static_cast<uint32_t>(p.page_size)),
      .num_pages = static_cast<int32_t>(std::min<int64_t>(a.num_pages, INT32_MAX)),
      .causal = p.causal && p.s_q > 1 ? 1 : 0,
      .causal_bounds = nullptr,  // set with the local lengths (cp_lengths.h)
      .scale_log2 = a.softmax_scale * 1.4426950408889634f,
      .q_scale_ptr = p.q_dtype == DType::kFP8E4M3 ? a.q_scale_ptr : nullptr,
      .k_scale_ptr = p.kv_dtype == DType::kFP8E4M3 ? a.k_scale_ptr : nullptr,
      .q_scale = p.q_dtype == DType::kFP8E4M3 && a.q_scale_ptr == nullptr ? a.q_scale : 1.0f,
      .k_scale = p.kv_dtype == DType::kFP8E4M3 && a.k_scale_ptr == nullptr && !std::isnan(a.k_scale)
                     ? a.k_scale
                     : 1.0f,
  };
}

}  // namespace mlakit::plan
