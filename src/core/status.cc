#include <cmath>
#include <exception>
#include <new>
#include <system_error>

#include "core/check.h"
#include "core/guard.h"
#include "mlakit/mlakit.h"

namespace mlakit {

std::string_view version() { return "0.1.0"; }

std::string_view to_string(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kCudaError: return "cuda error";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  try {
    return str_cat(mlakit::to_string(code_), ": ", message_);
  } catch (...) {  // out of host memory: the message alone is what there is
    return {};
  }
}

Status status_of_current_exception(std::string_view where) noexcept {
  try {
    try {
      throw;
    } catch (const std::bad_alloc&) {
      return Status(StatusCode::kInternal, str_cat(where, ": out of host memory (std::bad_alloc)"));
    } catch (const std::system_error& e) {
      return Status(StatusCode::kInternal,
                    str_cat(where, ": system error ", e.code().value(), " (", e.what(), ")"));
    } catch (const std::exception& e) {
      return Status(StatusCode::kInternal, str_cat(where, ": ", e.what()));
    } catch (...) {
      return Status(StatusCode::kInternal, str_cat(where, ": an unknown exception"));
    }
  } catch (...) {  // the message itself could not be allocated
    return Status(StatusCode::kInternal, std::string());
  }
}

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP8E4M3: return "fp8_e4m3";
    case DType::kFP32: return "fp32";
  }
  return "unknown";
}

std::string_view to_string(KvLayout layout) {
  switch (layout) {
    case KvLayout::kDense: return "dense";
    case KvLayout::kFp8Blockwise: return "fp8_blockwise";
    case KvLayout::kFp8V4: return "fp8_v4";
  }
  return "unknown";
}

size_t dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
    case DType::kFP16: return 2;
    case DType::kFP8E4M3: return 1;
    case DType::kFP32: return 4;
  }
  return 0;
}

size_t kv_token_bytes(DType kv_dtype, KvLayout layout) {
  if (layout == KvLayout::kFp8Blockwise) return kBlockwiseBytes;
  if (layout == KvLayout::kFp8V4) return kV4TokenBytes;
  return kDqk * dtype_bytes(kv_dtype);
}

size_t kv_page_bytes(DType kv_dtype, KvLayout layout, int page_size) {
  const size_t bytes = static_cast<size_t>(page_size) * kv_token_bytes(kv_dtype, layout);
  if (layout != KvLayout::kFp8V4) return bytes;
  return (bytes + kV4PageAlign - 1) / kV4PageAlign * kV4PageAlign;
}

int layout_d_qk(KvLayout layout) { return layout == KvLayout::kFp8V4 ? kV4Dqk : kDqk; }

}  // namespace mlakit
