// Validation of a Problem (once, at Decoder creation) and of RunArgs (each run: host-side checks
// only, nothing is read from device memory).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <utility>

#include "core/check.h"
#include "core/guard.h"
#include "core/views.h"
#include "mlakit/mlakit.h"

namespace mlakit {
namespace {

bool is_16bit(DType d) { return d == DType::kBF16 || d == DType::kFP16; }

Status check_range(std::string_view arg, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return Status::Ok();
  return invalid_argument(arg, str_cat(lo, "..", hi), value);
}

Status check_pointer(std::string_view arg, const void* ptr, size_t alignment) {
  if (ptr == nullptr) return invalid_argument(arg, "a non-null pointer", "nullptr");
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  if (address % alignment != 0) {
    return invalid_argument(arg, str_cat("a pointer aligned to ", alignment, " bytes"),
                            str_cat("0x", std::hex, address));
  }
  return Status::Ok();
}

Status check_absent(std::string_view arg, const void* ptr, std::string_view because) {
  if (ptr == nullptr) return Status::Ok();
  return invalid_argument(arg, str_cat("nullptr because ", because), "a pointer");
}

Status check_scale(std::string_view arg, float value, const float* ptr, std::string_view why) {
  if (ptr != nullptr) {
    if (!std::isnan(value)) {
      return invalid_argument(arg, "either a host value or a pointer, not both", "both");
    }
    return check_pointer(str_cat(arg, "_ptr"), ptr, alignof(float));
  }
  if (std::isnan(value)) {
    return invalid_argument(arg, str_cat("a scale (host value or pointer) for ", why), "none");
  }
  if (!std::isfinite(value) || value <= 0.0f) {
    return invalid_argument(arg, "a finite value > 0", value);
  }
  return Status::Ok();
}

// An argument's bytes, [begin, begin + bytes), for the overlap check.
struct Span {
  std::string_view name;
  uintptr_t begin = 0;
  uint64_t bytes = 0;
  uintptr_t end() const {  // saturated: a hostile pointer near the top must not wrap
    uintptr_t e = 0;
    return __builtin_add_overflow(begin, bytes, &e) ? UINTPTR_MAX : e;
  }
};

Span span(std::string_view name, const void* ptr, uint64_t bytes) {
  return {.name = name, .begin = reinterpret_cast<uintptr_t>(ptr), .bytes = ptr ? bytes : 0};
}

// Bytes from the first element of a strided tensor to one past its last: the sum of (size - 1) *
// stride over its outer dimensions, plus its contiguous row; saturated at UINT64_MAX (2^31 pages
// 2^39 elements apart overflow).
uint64_t view_bytes(std::initializer_list<std::pair<int64_t, int64_t>> size_stride, int64_t row,
                    size_t elem_bytes) {
  uint64_t elems = row, term = 0;
  for (const auto& [size, stride] : size_stride) {
    if (size <= 0) return 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(size - 1), static_cast<uint64_t>(stride),
                               &term) ||
        __builtin_add_overflow(elems, term, &elems)) {
      return UINT64_MAX;
    }
  }
  return __builtin_mul_overflow(elems, elem_bytes, &term) ? UINT64_MAX : term;
}

// Strides given for views (RunArgs, "Views"): > 0, below 2^40 elements (so that extents cannot
// overflow), rows 16-byte aligned; out's rows apart from each other (it is written).
Status check_views(const Problem& p, const RunArgs& a) {
  // A V4 page is every token's data, then every token's scale row, then padding: not a
  // [page, token, elems] view, so its cache takes no strides.
  if (p.kv_layout == KvLayout::kFp8V4 && (a.kv_stride_page != 0 || a.kv_stride_token != 0)) {
    return invalid_argument(
        "kv_stride_page, kv_stride_token",
        str_cat("0, 0 (contiguous) with kv_layout ", to_string(p.kv_layout),
                " (its pages hold the scale rows after the tokens' data: no view of them)"),
        str_cat(a.kv_stride_page, ", ", a.kv_stride_token));
  }
  const size_t kv_elem = p.kv_layout == KvLayout::kFp8Blockwise ? 1 : dtype_bytes(p.kv_dtype);
  struct Given {
    std::string_view name;
    int64_t stride;
    size_t elem_bytes;
  };
  // Innermost first: a misaligned row stride makes the outer ones misaligned too.
  const Given given[] = {
      {"q_stride_h", a.q_stride_h, dtype_bytes(p.q_dtype)},
      {"q_stride_s", a.q_stride_s, dtype_bytes(p.q_dtype)},
      {"q_stride_b", a.q_stride_b, dtype_bytes(p.q_dtype)},
      {"kv_stride_token", a.kv_stride_token, kv_elem},
      {"kv_stride_page", a.kv_stride_page, kv_elem},
      {"out_stride_h", a.out_stride_h, dtype_bytes(p.out_dtype)},
      {"out_stride_s", a.out_stride_s, dtype_bytes(p.out_dtype)},
      {"out_stride_b", a.out_stride_b, dtype_bytes(p.out_dtype)},
  };

  constexpr int64_t kMaxStride = int64_t{1} << 40;
  for (const Given& g : given) {
    if (g.stride == 0) continue;  // contiguous
    if (g.stride < 0 || g.stride >= kMaxStride) {
      return invalid_argument(g.name, str_cat("0 (contiguous) or 1..", kMaxStride - 1, " elements"),
                              g.stride);
    }
    if (g.stride * g.elem_bytes % 16 != 0) {
      return invalid_argument(g.name,
                              str_cat("a stride whose rows stay 16-byte aligned (a multiple of ",
                                      16 / g.elem_bytes, " elements of ", g.elem_bytes, " bytes)"),
                              g.stride);
    }
  }
  // var_q: q, out and lse are packed by query token (cu_seqlens_q), no request stride.
  if (p.var_q) {
    for (const auto& [name, stride] :
         {std::pair("q_stride_b", a.q_stride_b), std::pair("out_stride_b", a.out_stride_b)}) {
      if (stride != 0) {
        return invalid_argument(
            name, "0 with var_q (rows packed by query token: row cu_seqlens_q[i] + t)", stride);
      }
    }
  }
  // out: with its dimensions ordered by stride, each stride at least the extent of the smaller
  // ones, so that no two elements share an address. (var_q: the host does not know the packed
  // rows' count, so b * s_q rows [b * s_q, h_q, 512] are checked: a head-major out holding fewer
  // rows is refused.)
  const Views v = views_of(p, a);
  const int64_t tokens = p.var_q ? int64_t{a.batch} * p.s_q : p.s_q;
  const int64_t requests = p.var_q ? 1 : a.batch;
  std::pair<int64_t, int64_t> dims[] = {{v.out_h, p.h_q}, {v.out_s, tokens}, {v.out_b, requests}};
  std::sort(std::begin(dims), std::end(dims));
  int64_t extent = kDv;
  for (const auto& [stride, size] : dims) {
    if (size <= 1) continue;
    if (stride < extent) {
      const std::string shape =
          p.var_q ? str_cat("[", tokens, ", ", p.h_q, ", ", kDv, "]")
                  : str_cat("[", a.batch, ", ", p.s_q, ", ", p.h_q, ", ", kDv, "]");
      const std::string strides = p.var_q
                                      ? str_cat("[", v.out_s, ", ", v.out_h, ", 1]")
                                      : str_cat("[", v.out_b, ", ", v.out_s, ", ", v.out_h, ", 1]");
      return invalid_argument("out strides",
                              str_cat("rows that do not overlap (each stride >= ", extent,
                                      ", the extent of the dimensions with smaller strides)"),
                              str_cat(strides, " for shape ", shape));
    }
    // Saturating: strides below 2^40 times up to 2^24 rows can pass 2^63.
    int64_t span = 0;
    if (__builtin_mul_overflow(stride, size - 1, &span) ||
        __builtin_add_overflow(span, extent, &extent)) {
      extent = INT64_MAX;
    }
  }
  return Status::Ok();
}

// out, lse and the workspace are written: one that overlaps any other argument is a data race
// (and wrong results). From the addresses and the shapes the header gives the arguments (the block
// table [b, block_table_stride], ...); nothing is read.
Status check_apart(const Problem& p, const RunArgs& a, size_t workspace_needed,
                   const void* workspace, int64_t packed_rows = -1) {
  // var_q: q, out, lse and the indices hold packed_rows rows when it is known (the host read
  // cu_seqlens_q[b]), else their first query token only (the offsets live where the backend runs).
  const uint64_t b = a.batch;
  const int64_t requests = p.var_q ? 1 : a.batch;
  const int64_t tokens = !p.var_q ? p.s_q : packed_rows >= 0 ? packed_rows : 1;
  const uint64_t rows = static_cast<uint64_t>(requests * tokens) * p.h_q;
  // A sparse run neither reads nor checks the block table and lengths.
  const int32_t* table = p.sparse() ? nullptr : a.block_table;
  const int32_t* lens = p.sparse() ? nullptr : a.seq_lens;
  const Views v = views_of(p, a);
  const size_t kv_elem = p.kv_layout == KvLayout::kFp8Blockwise ? 1 : dtype_bytes(p.kv_dtype);
  const Span spans[] = {
      // Written first: each is checked against all that follow it.
      span("out", a.out,
           view_bytes({{requests, v.out_b}, {tokens, v.out_s}, {p.h_q, v.out_h}}, kDv,
                      dtype_bytes(p.out_dtype))),
      span("lse", a.lse, rows * sizeof(float)),
      span("workspace", workspace, workspace_needed),
      span("q", a.q,
           view_bytes({{requests, v.q_b}, {tokens, v.q_s}, {p.h_q, v.q_h}}, p.d_qk,
                      dtype_bytes(p.q_dtype))),
      // A V4 page holds the scale rows and padding after the tokens' data: whole pages.
      span("kv_cache", a.kv_cache,
           p.kv_layout == KvLayout::kFp8V4
               ? static_cast<uint64_t>(a.num_pages) *
                     kv_page_bytes(p.kv_dtype, p.kv_layout, p.page_size)
               : view_bytes({{a.num_pages, v.kv_page}, {p.page_size, v.kv_token}},
                            Views::token_elems(p), kv_elem)),
      span("block_table", table, b * static_cast<uint64_t>(a.block_table_stride) * sizeof(int32_t)),
      span("seq_lens", lens, b * sizeof(int32_t)),
      span("cu_seqlens_q", a.cu_seqlens_q, p.var_q ? (b + 1) * sizeof(int32_t) : 0),
      span("indices", a.indices, rows / p.h_q * p.topk * sizeof(int32_t)),
      span("topk_lens", a.topk_lens, b * sizeof(int32_t)),
      span("extra_kv_cache", a.extra_kv_cache,
           static_cast<uint64_t>(a.extra_num_pages) *
               kv_page_bytes(p.kv_dtype, p.kv_layout, p.extra_page_size_or_default())),
      span("extra_indices", a.extra_indices, rows / p.h_q * p.extra_topk * sizeof(int32_t)),
      span("extra_topk_lens", a.extra_topk_lens, b * sizeof(int32_t)),
      span("sinks", a.sinks, p.h_q * sizeof(float)),
      span("q_scale_ptr", a.q_scale_ptr, sizeof(float)),
      span("k_scale_ptr", a.k_scale_ptr, sizeof(float)),
  };
  constexpr int kWritten = 3;
  for (int i = 0; i < kWritten; ++i) {
    const Span& w = spans[i];
    for (int j = i + 1; j < static_cast<int>(std::size(spans)); ++j) {
      const Span& o = spans[j];
      if (w.bytes == 0 || o.bytes == 0 || w.begin >= o.end() || o.begin >= w.end()) continue;
      return invalid_argument(
          w.name, "memory apart from every other argument",
          str_cat(w.bytes, " bytes at 0x", std::hex, w.begin, std::dec, " that overlap ", o.name,
                  " (", o.bytes, " bytes at 0x", std::hex, o.begin, ")"));
    }
  }
  return Status::Ok();
}

// Context parallelism (Problem::cp_*): the ranges, and what a rank's partial must be for the
// merge (mlakit/cp.h): with its LSE, and without sinks (the merge applies them).
Status check_context_parallel(const Problem& p) {
  MLAKIT_RETURN_IF_ERROR(check_range("cp_world", p.cp_world, 1, kMaxCpWorld));
  MLAKIT_RETURN_IF_ERROR(check_range("cp_rank", p.cp_rank, 0, p.cp_world - 1));
  MLAKIT_RETURN_IF_ERROR(check_range("cp_interleave", p.cp_interleave, 1, kMaxSeqLen));
  if (!p.context_parallel()) return Status::Ok();
  if (!p.return_lse) {
    return invalid_argument(
        "return_lse",
        str_cat("true with cp_world ", p.cp_world, " (merge_partials needs every rank's LSE)"),
        "false");
  }
  if (p.has_sinks) {
    return invalid_argument(
        "has_sinks",
        str_cat("false with cp_world ", p.cp_world,
                " (a sink applied to each partial is wrong after the merge: pass the sinks to "
                "merge_partials, MergeArgs::sinks)"),
        "true");
  }
  return Status::Ok();
}

Status validate_problem(const Problem& p) {
  MLAKIT_RETURN_IF_ERROR(check_range("heads (h_q)", p.h_q, 1, kMaxHeads));
  MLAKIT_RETURN_IF_ERROR(check_range("s_q", p.s_q, 1, kMaxSq));
  if (p.kv_layout != KvLayout::kDense && p.kv_layout != KvLayout::kFp8Blockwise &&
      p.kv_layout != KvLayout::kFp8V4) {
    return invalid_argument("kv_layout", "dense, fp8_blockwise or fp8_v4",
                            static_cast<int>(p.kv_layout));
  }
  // The layout decides the head dimensions: d_qk 576 (512 latent + 64 RoPE), or 512 for V4 (448
  // NoPE + 64 RoPE); d_v is 512 in both.
  const int d_qk = layout_d_qk(p.kv_layout);
  if (p.d_qk != d_qk) {
    return invalid_argument("d_qk", str_cat(d_qk, " (kv_layout ", to_string(p.kv_layout), ")"),
                            p.d_qk);
  }
  MLAKIT_RETURN_IF_ERROR(check_range("d_v", p.d_v, kDv, kDv));
  MLAKIT_RETURN_IF_ERROR(check_range("page_size", p.page_size, 1, 1024));
  MLAKIT_RETURN_IF_ERROR(check_range("max_batch", p.max_batch, 1, kMaxBatch));
  MLAKIT_RETURN_IF_ERROR(check_range("max_seq_len", p.max_seq_len, 0, kMaxSeqLen));
  MLAKIT_RETURN_IF_ERROR(check_range("topk", p.topk, 0, 1 << 16));
  MLAKIT_RETURN_IF_ERROR(check_range("extra_topk", p.extra_topk, 0, 1 << 16));
  if (p.has_extra() && !p.sparse()) {
    return invalid_argument("extra_topk", "0 for a dense problem (an extra cache needs topk > 0)",
                            p.extra_topk);
  }
  if (p.has_extra()) {
    MLAKIT_RETURN_IF_ERROR(check_range("extra_page_size", p.extra_page_size, 0, 1024));
  } else if (p.extra_page_size != 0) {
    return invalid_argument("extra_page_size", "0 without an extra cache (extra_topk 0)",
                            p.extra_page_size);
  }

  MLAKIT_RETURN_IF_ERROR(check_context_parallel(p));
  if (p.lse_base2 && !p.return_lse) {
    return invalid_argument("lse_base2", "false without return_lse (no LSE is written)", "true");
  }

  if (!is_16bit(p.out_dtype)) {
    return invalid_argument("out_dtype", "bf16 or fp16", to_string(p.out_dtype));
  }
  if (p.kv_layout != KvLayout::kDense && p.kv_dtype != DType::kFP8E4M3) {
    return invalid_argument("kv_dtype", str_cat("fp8_e4m3 with kv_layout ", to_string(p.kv_layout)),
                            to_string(p.kv_dtype));
  }
  if (is_16bit(p.kv_dtype)) {
    // 16-bit caches: q and out in the cache's dtype.
    if (p.q_dtype != p.kv_dtype) {
      return invalid_argument("q_dtype", str_cat(to_string(p.kv_dtype), " (the kv_dtype)"),
                              to_string(p.q_dtype));
    }
    if (p.out_dtype != p.kv_dtype) {
      return invalid_argument("out_dtype", str_cat(to_string(p.kv_dtype), " (the kv_dtype)"),
                              to_string(p.out_dtype));
    }
  } else if (p.kv_dtype == DType::kFP8E4M3) {
    const bool fp8_q_ok = p.kv_layout == KvLayout::kDense;
    if (!(is_16bit(p.q_dtype) || (fp8_q_ok && p.q_dtype == DType::kFP8E4M3))) {
      return invalid_argument("q_dtype",
                              fp8_q_ok ? std::string("bf16, fp16 or fp8_e4m3 with an fp8 cache")
                                       : str_cat("bf16 or fp16 with ", to_string(p.kv_layout)),
                              to_string(p.q_dtype));
    }
  } else {
    return invalid_argument("kv_dtype", "bf16, fp16 or fp8_e4m3", to_string(p.kv_dtype));
  }
  return Status::Ok();
}

Status check_args(const Problem& p, const RunArgs& a, size_t workspace_needed,
                  const void* workspace, size_t workspace_size) {
  MLAKIT_RETURN_IF_ERROR(check_range("batch", a.batch, 1, p.max_batch));
  MLAKIT_RETURN_IF_ERROR(check_pointer("q", a.q, 16));
  MLAKIT_RETURN_IF_ERROR(check_pointer("kv_cache", a.kv_cache, 16));
  MLAKIT_RETURN_IF_ERROR(check_pointer("out", a.out, 16));
  MLAKIT_RETURN_IF_ERROR(check_range("num_pages", a.num_pages, 1, INT32_MAX));
  MLAKIT_RETURN_IF_ERROR(check_views(p, a));
  if (p.sparse()) {
    if (a.indices == nullptr) {
      return invalid_argument("indices", str_cat("[b, s_q, ", p.topk, "] int32 for sparse topk"),
                              "nullptr");
    }
    MLAKIT_RETURN_IF_ERROR(check_pointer("indices", a.indices, alignof(int32_t)));
    if (a.topk_lens != nullptr) {
      MLAKIT_RETURN_IF_ERROR(check_pointer("topk_lens", a.topk_lens, alignof(int32_t)));
    }
  } else {
    MLAKIT_RETURN_IF_ERROR(check_pointer("block_table", a.block_table, alignof(int32_t)));
    MLAKIT_RETURN_IF_ERROR(check_pointer("seq_lens", a.seq_lens, alignof(int32_t)));
    MLAKIT_RETURN_IF_ERROR(check_range("block_table_stride", a.block_table_stride, 1, INT32_MAX));
    MLAKIT_RETURN_IF_ERROR(check_absent("indices", a.indices, "the problem is dense (topk 0)"));
    MLAKIT_RETURN_IF_ERROR(check_absent("topk_lens", a.topk_lens, "the problem is dense (topk 0)"));
  }
  if (p.var_q) {
    if (a.cu_seqlens_q == nullptr) {
      return invalid_argument("cu_seqlens_q", "[b + 1] int32 query-token offsets for var_q",
                              "nullptr");
    }
    MLAKIT_RETURN_IF_ERROR(check_pointer("cu_seqlens_q", a.cu_seqlens_q, alignof(int32_t)));
  } else {
    MLAKIT_RETURN_IF_ERROR(check_absent("cu_seqlens_q", a.cu_seqlens_q, "Problem::var_q is false"));
  }
  if (p.has_extra()) {
    MLAKIT_RETURN_IF_ERROR(check_pointer("extra_kv_cache", a.extra_kv_cache, 16));
    MLAKIT_RETURN_IF_ERROR(check_range("extra_num_pages", a.extra_num_pages, 1, INT32_MAX));
    if (a.extra_indices == nullptr) {
      return invalid_argument(
          "extra_indices", str_cat("[b, s_q, ", p.extra_topk, "] int32 for extra_topk"), "nullptr");
    }
    MLAKIT_RETURN_IF_ERROR(check_pointer("extra_indices", a.extra_indices, alignof(int32_t)));
    if (a.extra_topk_lens != nullptr) {
      MLAKIT_RETURN_IF_ERROR(check_pointer("extra_topk_lens", a.extra_topk_lens, alignof(int32_t)));
    }
  } else {
    constexpr std::string_view kNoExtra = "the problem has no extra cache (extra_topk 0)";
    MLAKIT_RETURN_IF_ERROR(check_absent("extra_kv_cache", a.extra_kv_cache, kNoExtra));
    MLAKIT_RETURN_IF_ERROR(check_absent("extra_indices", a.extra_indices, kNoExtra));
    MLAKIT_RETURN_IF_ERROR(check_absent("extra_topk_lens", a.extra_topk_lens, kNoExtra));
    if (a.extra_num_pages != 0) {
      return invalid_argument("extra_num_pages", str_cat("0 because ", kNoExtra),
                              a.extra_num_pages);
    }
  }
  if (p.has_sinks) {
    MLAKIT_RETURN_IF_ERROR(check_pointer("sinks", a.sinks, alignof(float)));
  } else {
    MLAKIT_RETURN_IF_ERROR(check_absent("sinks", a.sinks, "Problem::has_sinks is false"));
  }
  if (p.return_lse) {
    MLAKIT_RETURN_IF_ERROR(check_pointer("lse", a.lse, alignof(float)));
  } else {
    MLAKIT_RETURN_IF_ERROR(check_absent("lse", a.lse, "Problem::return_lse is false"));
  }
  if (!std::isfinite(a.softmax_scale) || a.softmax_scale <= 0.0f) {
    return invalid_argument("softmax_scale", "a finite value > 0", a.softmax_scale);
  }
  if (p.q_dtype == DType::kFP8E4M3) {
    MLAKIT_RETURN_IF_ERROR(check_scale("q_scale", a.q_scale, a.q_scale_ptr, "an fp8 q"));
  } else if (!std::isnan(a.q_scale) || a.q_scale_ptr != nullptr) {
    return invalid_argument("q_scale", str_cat("none for a ", to_string(p.q_dtype), " q"),
                            "a scale");
  }
  if (p.kv_dtype == DType::kFP8E4M3 && p.kv_layout == KvLayout::kDense) {
    MLAKIT_RETURN_IF_ERROR(check_scale("k_scale", a.k_scale, a.k_scale_ptr, "an fp8 cache"));
  } else if (p.kv_layout == KvLayout::kFp8Blockwise || p.kv_layout == KvLayout::kFp8V4) {
    if (a.k_scale_ptr != nullptr || !std::isnan(a.k_scale)) {
      MLAKIT_RETURN_IF_ERROR(
          check_scale("k_scale", a.k_scale, a.k_scale_ptr, to_string(p.kv_layout)));
    }
  } else if (!std::isnan(a.k_scale) || a.k_scale_ptr != nullptr) {
    return invalid_argument("k_scale", str_cat("none for a ", to_string(p.kv_dtype), " cache"),
                            "a scale");
  }
  if (workspace_size < workspace_needed) {
    return invalid_argument("workspace_size", str_cat("at least ", workspace_needed, " bytes"),
                            workspace_size);
  }
  if (workspace_needed > 0) {
    MLAKIT_RETURN_IF_ERROR(check_pointer("workspace", workspace, 256));
  }
  return check_apart(p, a, workspace_needed, workspace);
}

}  // namespace

Status check_packed_rows_apart(const Problem& p, const RunArgs& a, int64_t packed_rows) {
  return check_apart(p, a, 0, nullptr, packed_rows);
}

Status validate(const Problem& p) {
  return guarded("validate", [&] { return validate_problem(p); });
}

Status validate_args(const Problem& p, const RunArgs& a, size_t workspace_needed,
                     const void* workspace, size_t workspace_size) {
  return guarded("validate_args",
                 [&] { return check_args(p, a, workspace_needed, workspace, workspace_size); });
}

std::string describe(const Problem& p) try {
  std::string s = str_cat("h_q ", p.h_q, ", s_q ", p.s_q, ", page ", p.page_size, ", q ",
                          to_string(p.q_dtype), ", kv ", to_string(p.kv_dtype));
  if (p.kv_layout != KvLayout::kDense) s += str_cat(" ", to_string(p.kv_layout));
  s += str_cat(", out ", to_string(p.out_dtype), ", max_batch ", p.max_batch, ", max_seq_len ",
               p.max_seq_len);
  if (p.s_q > 1) s += p.causal ? ", causal" : ", non-causal";
  if (p.var_q) s += ", var_q";
  if (p.sparse()) s += str_cat(", sparse topk ", p.topk);
  if (p.has_extra()) {
    s += str_cat(", extra topk ", p.extra_topk, " page ", p.extra_page_size_or_default());
  }
  if (p.context_parallel()) {
    s += str_cat(", cp rank ", p.cp_rank, "/", p.cp_world, " interleave ", p.cp_interleave);
  }
  if (p.has_sinks) s += ", sinks";
  if (p.return_lse) s += p.lse_base2 ? ", lse base 2" : ", lse";
  if (p.enable_pdl) s += ", pdl";
  return s;
} catch (...) {  // out of host memory (guard.h)
  return {};
}

}  // namespace mlakit
