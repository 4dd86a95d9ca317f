// The public entry points of mlakit::ops (include/mlakit/ops.h): the host-visible checks of each
// op's arguments, then the cpu reference or the CUDA launcher.
#include "mlakit/ops.h"

#include <cmath>
#include <cstdint>

#include "core/arg_checks.h"
#include "core/check.h"
#include "core/guard.h"
#include "ops/append/append.h"
#include "ops/indexer/indexer.h"
#include "ops/topk/topk.h"

namespace mlakit::ops {
namespace {

Status check_device(Device device, bool has_cuda_kernel, std::string_view op) {
  if (device != Device::kCpu && device != Device::kCuda) {
    return invalid_argument("device", "kCpu (0) or kCuda (1)", static_cast<int32_t>(device));
  }
  if (device == Device::kCuda) {
#if !defined(MLAKIT_OPS_CUDA)
    (void)has_cuda_kernel;
    return unsupported(op, " on device cuda: mlakit was built without CUDA");
#else
    if (!has_cuda_kernel) return unsupported(op, " has no CUDA kernel yet (use device cpu)");
#endif
  }
  return Status::Ok();
}

Status check_pointer(std::string_view name, const void* ptr, size_t align) {
  if (ptr == nullptr) return invalid_argument(name, "a pointer", "null");
  if (reinterpret_cast<uintptr_t>(ptr) % align != 0) {
    return invalid_argument(name, str_cat("a ", align, "-byte aligned address"), ptr);
  }
  return Status::Ok();
}

using args::check_range;

// A row stride: 0 (= width) or at least width. Returns the resolved stride in *ld.
Status check_stride(std::string_view name, int64_t stride, int64_t width, int64_t* ld) {
  if (stride != 0 && stride < width) {
    return invalid_argument(name, str_cat("0 or at least ", width), stride);
  }
  *ld = stride == 0 ? width : stride;
  return Status::Ok();
}

Status check_input_dtype(std::string_view name, DType dtype) {
  if (dtype != DType::kBF16 && dtype != DType::kFP16) {
    return invalid_argument(name, "bf16 or fp16", to_string(dtype));
  }
  return Status::Ok();
}

Status check_cache_shape(std::string_view name, const void* cache, int64_t num_pages,
                         int32_t page_size) {
  MLAKIT_RETURN_IF_ERROR(check_range("page_size", page_size, 1, kMaxSeqLen));
  MLAKIT_RETURN_IF_ERROR(check_range("num_pages", num_pages, 0, INT32_MAX));
  return check_pointer(name, cache, 16);
}

Status validate_append_kv(const AppendKvArgs& a, int64_t* ld) {
  MLAKIT_RETURN_IF_ERROR(check_range("n_tokens", a.n_tokens, 0, INT32_MAX));
  MLAKIT_RETURN_IF_ERROR(check_input_dtype("kv_dtype", a.kv_dtype));
  const bool dense = a.cache_layout == KvLayout::kDense;
  if (!dense && a.cache_layout != KvLayout::kFp8Blockwise && a.cache_layout != KvLayout::kFp8V4) {
    return invalid_argument("cache_layout", "kDense, kFp8Blockwise or kFp8V4",
                            static_cast<int32_t>(a.cache_layout));
  }
  if (dense && a.cache_dtype != DType::kBF16 && a.cache_dtype != DType::kFP16 &&
      a.cache_dtype != DType::kFP8E4M3) {
    return invalid_argument("cache_dtype", "bf16, fp16 or e4m3 (kDense)", to_string(a.cache_dtype));
  }
  if (!dense && a.cache_dtype != DType::kFP8E4M3) {
    return invalid_argument("cache_dtype", str_cat("e4m3 (", to_string(a.cache_layout), ")"),
                            to_string(a.cache_dtype));
  }
  const bool wants_scale = dense && a.cache_dtype == DType::kFP8E4M3;
  const bool has_value = !std::isnan(a.k_scale);
  const bool has_ptr = a.k_scale_ptr != nullptr;
  if (wants_scale && has_value == has_ptr) {
    return invalid_argument("k_scale / k_scale_ptr", "exactly one of them (the e4m3 cache)",
                            has_value ? "both" : "neither");
  }
  if (!wants_scale && (has_value || has_ptr)) {
    return invalid_argument("k_scale / k_scale_ptr",
                            str_cat("neither (", to_string(a.cache_layout), " ",
                                    to_string(a.cache_dtype), " has no per-tensor scale)"),
                            has_value ? str_cat(a.k_scale) : "a pointer");
  }
  if (has_value && wants_scale && !(std::isfinite(a.k_scale) && a.k_scale > 0)) {
    return invalid_argument("k_scale", "a finite value > 0", a.k_scale);
  }
  MLAKIT_RETURN_IF_ERROR(check_stride("kv_stride", a.kv_stride, layout_d_qk(a.cache_layout), ld));
  MLAKIT_RETURN_IF_ERROR(check_cache_shape("kv_cache", a.kv_cache, a.num_pages, a.page_size));
  if (a.n_tokens == 0) return Status::Ok();
  MLAKIT_RETURN_IF_ERROR(check_pointer("kv", a.kv, 2));
  MLAKIT_RETURN_IF_ERROR(check_pointer("slot_mapping", a.slot_mapping, 8));
  if (has_ptr) MLAKIT_RETURN_IF_ERROR(check_pointer("k_scale_ptr", a.k_scale_ptr, 4));
  return Status::Ok();
}

Status validate_append_indexer(const AppendIndexerArgs& a, int64_t* ld) {
  MLAKIT_RETURN_IF_ERROR(check_range("n_tokens", a.n_tokens, 0, INT32_MAX));
  MLAKIT_RETURN_IF_ERROR(check_input_dtype("k_dtype", a.k_dtype));
  if (a.scale != IndexerScale::kAmax && a.scale != IndexerScale::kPowerOfTwo) {
    return invalid_argument("scale", "kAmax (0) or kPowerOfTwo (1)", static_cast<int32_t>(a.scale));
  }
  MLAKIT_RETURN_IF_ERROR(check_stride("k_stride", a.k_stride, kIndexerDim, ld));
  MLAKIT_RETURN_IF_ERROR(check_cache_shape("index_cache", a.index_cache, a.num_pages, a.page_size));
  if (a.n_tokens == 0) return Status::Ok();
  MLAKIT_RETURN_IF_ERROR(check_pointer("k", a.k, 2));
  return check_pointer("slot_mapping", a.slot_mapping, 8);
}

Status validate_indexer_logits(const IndexerLogitsArgs& a, int64_t* ld) {
  MLAKIT_RETURN_IF_ERROR(check_range("batch", a.batch, 0, kMaxBatch));
  MLAKIT_RETURN_IF_ERROR(check_range("next_n", a.next_n, 1, kIndexerMaxNextN));
  MLAKIT_RETURN_IF_ERROR(check_range("heads", a.heads, 1, kIndexerMaxHeads));
  MLAKIT_RETURN_IF_ERROR(check_range("max_len", a.max_len, 0, kMaxSeqLen));
  MLAKIT_RETURN_IF_ERROR(check_stride("logits_stride", a.logits_stride, a.max_len, ld));
  MLAKIT_RETURN_IF_ERROR(check_cache_shape("index_cache", a.index_cache, a.num_pages, a.page_size));
  MLAKIT_RETURN_IF_ERROR(check_range("block_table_stride", a.block_table_stride, 1, INT32_MAX));
  if (a.batch == 0) return Status::Ok();
  MLAKIT_RETURN_IF_ERROR(check_pointer("q", a.q, 16));
  MLAKIT_RETURN_IF_ERROR(check_pointer("weights", a.weights, 4));
  MLAKIT_RETURN_IF_ERROR(check_pointer("block_table", a.block_table, 4));
  MLAKIT_RETURN_IF_ERROR(check_pointer("seq_lens", a.seq_lens, 4));
  return check_pointer("logits", a.logits, 4);
}

Status validate_topk(const TopkArgs& a, int64_t* ld) {
  MLAKIT_RETURN_IF_ERROR(check_range("batch", a.batch, 0, kMaxBatch));
  MLAKIT_RETURN_IF_ERROR(check_range("next_n", a.next_n, 1, kIndexerMaxNextN));
  MLAKIT_RETURN_IF_ERROR(check_range("k", a.k, 1, kTopkMax));
  MLAKIT_RETURN_IF_ERROR(check_range("max_len", a.max_len, 0, kMaxSeqLen));
  MLAKIT_RETURN_IF_ERROR(check_stride("logits_stride", a.logits_stride, a.max_len, ld));
  MLAKIT_RETURN_IF_ERROR(check_range("page_size", a.page_size, 1, kMaxSeqLen));
  const int64_t pages_needed = (a.max_len + a.page_size - 1) / a.page_size;
  MLAKIT_RETURN_IF_ERROR(check_range("block_table_stride", a.block_table_stride,
                                     pages_needed > 0 ? pages_needed : 1, INT32_MAX));
  if (a.workspace != nullptr) {
    MLAKIT_RETURN_IF_ERROR(check_pointer("workspace", a.workspace, 256));
    const size_t needed = topk_workspace_bytes(a);
    if (a.workspace_size < needed) {
      return invalid_argument("workspace_size",
                              str_cat("at least ", needed, " (topk_workspace_bytes)"),
                              a.workspace_size);
    }
  }
  if (a.batch == 0) return Status::Ok();
  if (a.max_len > 0) MLAKIT_RETURN_IF_ERROR(check_pointer("logits", a.logits, 4));
  MLAKIT_RETURN_IF_ERROR(check_pointer("seq_lens", a.seq_lens, 4));
  MLAKIT_RETURN_IF_ERROR(check_pointer("block_table", a.block_table, 4));
  return check_pointer("indices", a.indices, 4);
}

}  // namespace

Status append_kv(Device device, const AppendKvArgs& args, Stream stream) {
  return guarded("ops::append_kv", [&] {
    MLAKIT_RETURN_IF_ERROR(check_device(device, true, "append_kv"));
    int64_t ld = 0;
    MLAKIT_RETURN_IF_ERROR(validate_append_kv(args, &ld));
    if (device == Device::kCpu) return append_kv_cpu(args, ld);
    return append_kv_cuda(args, ld, stream);
  });
}

Status append_indexer(Device device, const AppendIndexerArgs& args, Stream stream) {
  return guarded("ops::append_indexer", [&] {
    MLAKIT_RETURN_IF_ERROR(check_device(device, true, "append_indexer"));
    int64_t ld = 0;
    MLAKIT_RETURN_IF_ERROR(validate_append_indexer(args, &ld));
    if (device == Device::kCpu) return append_indexer_cpu(args, ld);
    return append_indexer_cuda(args, ld, stream);
  });
}

Status indexer_logits(Device device, const IndexerLogitsArgs& args, Stream stream) {
  return guarded("ops::indexer_logits", [&] {
    MLAKIT_RETURN_IF_ERROR(check_device(device, true, "indexer_logits"));
    int64_t ld = 0;
    MLAKIT_RETURN_IF_ERROR(validate_indexer_logits(args, &ld));
    if (device == Device::kCpu) return indexer_logits_cpu(args, ld);
    return indexer_logits_cuda(args, ld, stream);
  });
}

size_t topk_workspace_bytes(const TopkArgs& args) {
  const int64_t rows = int64_t{args.batch} * args.next_n;
  const bool in_range = args.batch >= 0 && args.batch <= kMaxBatch && args.next_n >= 1 &&
                        args.next_n <= kIndexerMaxNextN && args.max_len <= kMaxSeqLen;
  if (!in_range || !topk_multi_applies(rows, args.max_len, args.k)) return 0;
  return topk_multi_plan(rows, args.max_len, args.k).bytes;
}

Status topk_indices(Device device, const TopkArgs& args, Stream stream) {
  return guarded("ops::topk_indices", [&] {
    MLAKIT_RETURN_IF_ERROR(check_device(device, true, "topk_indices"));
    int64_t ld = 0;
    MLAKIT_RETURN_IF_ERROR(validate_topk(args, &ld));
    if (device == Device::kCpu) return topk_indices_cpu(args, ld);
    return topk_indices_cuda(args, ld, stream);
  });
}

}  // namespace mlakit::ops
