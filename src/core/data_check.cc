// Checks of a run's data values (data_check.h), and Decoder::check_data.
#include "core/data_check.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/cuda_check.h"
#include "mlakit/cp.h"

namespace mlakit {
namespace {

// Request i's lengths (lens[i], when given) and its index rows [s_q, topk] of one cache (var_q:
// its q_len rows from packed row cu_seqlens_q[i]).
Status check_listed(std::string_view lens_name, std::string_view indices_name, const int32_t* lens,
                    const int32_t* indices, int64_t topk, int64_t cache_tokens, const Problem& p,
                    const RunArgs& a, int i) {
  if (lens != nullptr && (lens[i] < 0 || lens[i] > topk)) {
    return invalid_argument(str_cat(lens_name, "[", i, "]"), str_cat("0..", topk), lens[i]);
  }
  const int64_t first = p.var_q ? a.cu_seqlens_q[i] : int64_t{i} * p.s_q;
  const int64_t tokens = p.var_q ? a.cu_seqlens_q[i + 1] - a.cu_seqlens_q[i] : p.s_q;
  const int32_t* idx = indices + first * topk;
  for (int64_t k = 0; k < tokens * topk; ++k) {
    if (idx[k] < -1 || idx[k] >= cache_tokens) {
      return invalid_argument(str_cat(indices_name, "[", i, ", ", k / topk, ", ", k % topk, "]"),
                              str_cat("-1 or a cache slot in 0..", cache_tokens - 1), idx[k]);
    }
  }
  return Status::Ok();
}

// A device array of n elements of T as a host copy (empty for a null pointer), after the work
// queued on the caller's stream (check_data synchronizes with it first).
template <typename T>
Status copy_to_host(const T* device, uint64_t n, Stream, std::vector<T>* host) {
  host->clear();
  if (device == nullptr || n == 0) return Status::Ok();
  host->resize(n);
  MLAKIT_CUDA_RETURN(cudaMemcpy(host->data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
  return Status::Ok();
}

}  // namespace

Status check_cu_seqlens_q(const Problem& p, const int32_t* cu, int32_t batch) {
  if (cu == nullptr) {
    return invalid_argument("cu_seqlens_q", "[b + 1] int32 query-token offsets for var_q",
                            "nullptr");
  }
  if (cu[0] != 0) return invalid_argument("cu_seqlens_q[0]", "0", cu[0]);
  for (int32_t i = 0; i < batch; ++i) {
    const int64_t q_len = int64_t{cu[i + 1]} - cu[i];
    if (q_len < 0 || q_len > p.s_q) {
      return invalid_argument(str_cat("cu_seqlens_q[", i + 1, "]"),
                              str_cat(cu[i], "..", int64_t{cu[i]} + p.s_q, " (cu_seqlens_q[", i,
                                      "] plus a query length of 0..s_q ", p.s_q, ")"),
                              cu[i + 1]);
    }
  }
  return Status::Ok();
}

Status check_host_data(const Problem& p, const RunArgs& a) {
  if (p.var_q) {
    MLAKIT_RETURN_IF_ERROR(check_cu_seqlens_q(p, a.cu_seqlens_q, a.batch));
    MLAKIT_RETURN_IF_ERROR(check_packed_rows_apart(p, a, a.cu_seqlens_q[a.batch]));
  }
  // Scales by pointer: validate_args checks host values but cannot read pointers; here they are
  // host memory too.
  for (const auto& [name, ptr] :
       {std::pair("q_scale_ptr[0]", a.q_scale_ptr), std::pair("k_scale_ptr[0]", a.k_scale_ptr)}) {
    if (ptr != nullptr && (!std::isfinite(*ptr) || *ptr <= 0.0f)) {
      return invalid_argument(name, "a finite value > 0", *ptr);
    }
  }
  if (p.has_sinks) {
    for (int h = 0; h < p.h_q; ++h) {
      if (std::isnan(a.sinks[h])) {
        return invalid_argument(str_cat("sinks[", h, "]"), "a logit, not NaN (-inf: no sink)",
                                a.sinks[h]);
      }
    }
  }
  const int64_t cache_tokens = a.num_pages * p.page_size;
  const int64_t extra_tokens = a.extra_num_pages * p.extra_page_size_or_default();
  for (int i = 0; i < a.batch; ++i) {
    if (p.sparse()) {
      MLAKIT_RETURN_IF_ERROR(check_listed("topk_lens", "indices", a.topk_lens, a.indices, p.topk,
                                          cache_tokens, p, a, i));
      if (p.has_extra()) {
        MLAKIT_RETURN_IF_ERROR(check_listed("extra_topk_lens", "extra_indices", a.extra_topk_lens,
                                            a.extra_indices, p.extra_topk, extra_tokens, p, a, i));
      }
      continue;
    }
    const int64_t len = a.seq_lens[i];
    const int64_t table_len = a.block_table_stride * p.page_size;
    // With context parallelism len is global and the block table holds this rank's share.
    const int64_t local_len =
        len < 0 ? len : cp_local_len(len, p.cp_world, p.cp_rank, p.cp_interleave);
    if (len < 0 || local_len > table_len || len > p.max_seq_len) {
      if (p.context_parallel() && len >= 0 && len <= p.max_seq_len) {
        return invalid_argument(
            str_cat("seq_lens[", i, "]"),
            str_cat("a global length whose share on cp_rank ", p.cp_rank, " fits the ", table_len,
                    " slots of the local block table (block_table_stride * page_size)"),
            str_cat(len, " (", local_len, " local tokens)"));
      }
      return invalid_argument(str_cat("seq_lens[", i, "]"),
                              str_cat("0..", std::min<int64_t>(table_len, p.max_seq_len),
                                      " (min of block_table_stride * page_size and max_seq_len)"),
                              len);
    }
    const int32_t* pages = a.block_table + i * a.block_table_stride;
    for (int64_t page = 0; page * p.page_size < local_len; ++page) {
      if (pages[page] < 0 || pages[page] >= a.num_pages) {
        return invalid_argument(str_cat("block_table[", i, ", ", page, "]"),
                                str_cat("a page id in 0..", a.num_pages - 1), pages[page]);
      }
    }
  }
  return Status::Ok();
}

Status Decoder::check_data(const RunArgs& args, Stream stream) const {
  const Problem& p = problem_;
  if (!device_memory()) return check_host_data(p, args);
  if (args.batch < 0 || args.batch > p.max_batch) {
    return invalid_argument("batch", str_cat("0..", p.max_batch), args.batch);
  }
  const uint64_t b = static_cast<uint64_t>(args.batch);
  std::vector<int32_t> seq_lens, table, indices, topk_lens, extra_indices, extra_lens, cu_seqlens;
  std::vector<float> sinks, q_scale, k_scale;
  RunArgs h = args;
  MLAKIT_CUDA_RETURN(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)));
  // Index rows: b * s_q, or with var_q the packed rows' count cu_seqlens_q[b], once it is valid.
  uint64_t index_rows = b * p.s_q;
  if (p.var_q && args.cu_seqlens_q != nullptr) {
    MLAKIT_RETURN_IF_ERROR(copy_to_host(args.cu_seqlens_q, b + 1, stream, &cu_seqlens));
    MLAKIT_RETURN_IF_ERROR(check_cu_seqlens_q(p, cu_seqlens.data(), args.batch));
    index_rows = static_cast<uint64_t>(cu_seqlens[b]);
    h.cu_seqlens_q = cu_seqlens.data();
  }
  if (p.sparse()) {
    MLAKIT_RETURN_IF_ERROR(copy_to_host(args.indices, index_rows * p.topk, stream, &indices));
    MLAKIT_RETURN_IF_ERROR(copy_to_host(args.topk_lens, b, stream, &topk_lens));
    MLAKIT_RETURN_IF_ERROR(
        copy_to_host(args.extra_indices, index_rows * p.extra_topk, stream, &extra_indices));
    MLAKIT_RETURN_IF_ERROR(copy_to_host(args.extra_topk_lens, b, stream, &extra_lens));
  } else {
    if (args.block_table_stride < 0) {
      return invalid_argument("block_table_stride", "a count >= 0", args.block_table_stride);
    }
    MLAKIT_RETURN_IF_ERROR(copy_to_host(args.seq_lens, b, stream, &seq_lens));
    MLAKIT_RETURN_IF_ERROR(copy_to_host(
        args.block_table, b * static_cast<uint64_t>(args.block_table_stride), stream, &table));
  }
  if (p.has_sinks) MLAKIT_RETURN_IF_ERROR(copy_to_host(args.sinks, p.h_q, stream, &sinks));
  MLAKIT_RETURN_IF_ERROR(copy_to_host(args.q_scale_ptr, 1, stream, &q_scale));
  MLAKIT_RETURN_IF_ERROR(copy_to_host(args.k_scale_ptr, 1, stream, &k_scale));
  const auto host = [](auto& v, auto* given) { return given == nullptr ? given : v.data(); };
  h.seq_lens = host(seq_lens, args.seq_lens);
  h.block_table = host(table, args.block_table);
  h.indices = host(indices, args.indices);
  h.topk_lens = host(topk_lens, args.topk_lens);
  h.extra_indices = host(extra_indices, args.extra_indices);
  h.extra_topk_lens = host(extra_lens, args.extra_topk_lens);
  h.sinks = host(sinks, args.sinks);
  h.q_scale_ptr = host(q_scale, args.q_scale_ptr);
  h.k_scale_ptr = host(k_scale, args.k_scale_ptr);
  return check_host_data(p, h);
}

}  // namespace mlakit
