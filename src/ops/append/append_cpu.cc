// The cpu reference of the cache-append ops: each token widened to float, quantized by the rules
// of include/mlakit/ops.h (scales from src/ops/quant.h) and written at its slot.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/numeric.h"
#include "core/parallel.h"
#include "ops/append/append.h"
#include "ops/quant.h"

namespace mlakit::ops {
namespace {

float load(const void* base, int64_t i, DType dtype) {
  const uint16_t bits = static_cast<const uint16_t*>(base)[i];
  return dtype == DType::kBF16 ? bf16_to_float(bits) : fp16_to_float(bits);
}

void store_u16(uint8_t* at, uint16_t bits) { std::memcpy(at, &bits, sizeof(bits)); }

// Slots outside [-1, tokens) refused before anything is written.
Status check_slots(const int64_t* slots, int64_t n, int64_t tokens) {
  for (int64_t t = 0; t < n; ++t) {
    if (slots[t] < -1 || slots[t] >= tokens) {
      return invalid_argument(str_cat("slot_mapping[", t, "]"),
                              str_cat("-1 or a cache slot in 0..", tokens - 1), slots[t]);
    }
  }
  return Status::Ok();
}

// Quantizes group values x[0:n] by `scale` into e4m3 bytes.
void quantize_group(const float* x, int n, float scale, uint8_t* dst) {
  for (int d = 0; d < n; ++d) dst[d] = float_to_e4m3(x[d] / scale);
}

float amax_of(const float* x, int n) {
  float m = 0;
  for (int d = 0; d < n; ++d) m = std::max(m, std::fabs(x[d]));
  return m;
}

void write_kv_token(const AppendKvArgs& a, float k_scale, const float* x, int64_t slot) {
  const size_t page_bytes = kv_page_bytes(a.cache_dtype, a.cache_layout, a.page_size);
  uint8_t* page = static_cast<uint8_t*>(a.kv_cache) + slot / a.page_size * page_bytes;
  const int64_t offset = slot % a.page_size;
  switch (a.cache_layout) {
    case KvLayout::kFp8Blockwise: {
      uint8_t* row = page + offset * kBlockwiseBytes;
      for (int g = 0; g < kDv / kBlockwiseGroup; ++g) {
        const float* xg = x + g * kBlockwiseGroup;
        const float scale = blockwise_scale(amax_of(xg, kBlockwiseGroup));
        quantize_group(xg, kBlockwiseGroup, scale, row + g * kBlockwiseGroup);
        std::memcpy(row + kDv + g * sizeof(float), &scale, sizeof(float));
      }
      uint8_t* rope = row + kDv + (kDv / kBlockwiseGroup) * sizeof(float);
      for (int d = 0; d < kDRope; ++d) store_u16(rope + 2 * d, float_to_bf16(x[kDv + d]));
      return;
    }
    case KvLayout::kFp8V4: {
      uint8_t* row = page + offset * kV4DataBytes;
      uint8_t* scales = page + int64_t{a.page_size} * kV4DataBytes + offset * kV4ScaleBytes;
      for (int g = 0; g < kV4Nope / kV4Group; ++g) {
        const float* xg = x + g * kV4Group;
        scales[g] = v4_exponent(amax_of(xg, kV4Group));
        quantize_group(xg, kV4Group, pow2(scales[g] - 127), row + g * kV4Group);
      }
      scales[kV4ScaleBytes - 1] = 0xff;
      for (int d = 0; d < kDRope; ++d)
        store_u16(row + kV4Nope + 2 * d, float_to_bf16(x[kV4Nope + d]));
      return;
    }
    case KvLayout::kDense: {
      uint8_t* row = page + offset * kDqk * dtype_bytes(a.cache_dtype);
      for (int d = 0; d < kDqk; ++d) {
        switch (a.cache_dtype) {
          case DType::kBF16: store_u16(row + 2 * d, float_to_bf16(x[d])); break;
          case DType::kFP16: store_u16(row + 2 * d, float_to_fp16(x[d])); break;
          default: row[d] = float_to_e4m3(x[d] / k_scale); break;
        }
      }
      return;
    }
  }
}

}  // namespace

Status append_kv_cpu(const AppendKvArgs& a, int64_t ld) {
  MLAKIT_RETURN_IF_ERROR(check_slots(a.slot_mapping, a.n_tokens, a.num_pages * a.page_size));
  const float k_scale = a.k_scale_ptr != nullptr ? *a.k_scale_ptr : a.k_scale;
  if (a.cache_layout == KvLayout::kDense && a.cache_dtype == DType::kFP8E4M3 &&
      (!std::isfinite(k_scale) || k_scale <= 0)) {
    return invalid_argument("k_scale_ptr[0]", "a finite value > 0", k_scale);
  }
  const int d_qk = layout_d_qk(a.cache_layout);
  parallel_for(a.n_tokens, [&](int64_t t) {
    const int64_t slot = a.slot_mapping[t];
    if (slot < 0) return;
    float x[kDqk];
    for (int d = 0; d < d_qk; ++d) x[d] = load(a.kv, t * ld + d, a.kv_dtype);
    write_kv_token(a, k_scale, x, slot);
  });
  return Status::Ok();
}

Status append_indexer_cpu(const AppendIndexerArgs& a, int64_t ld) {
  MLAKIT_RETURN_IF_ERROR(check_slots(a.slot_mapping, a.n_tokens, a.num_pages * a.page_size));
  const size_t page_bytes = indexer_page_bytes(a.page_size);
  parallel_for(a.n_tokens, [&](int64_t t) {
    const int64_t slot = a.slot_mapping[t];
    if (slot < 0) return;
    float x[kIndexerDim];
    for (int d = 0; d < kIndexerDim; ++d) x[d] = load(a.k, t * ld + d, a.k_dtype);
    uint8_t* page = static_cast<uint8_t*>(a.index_cache) + slot / a.page_size * page_bytes;
    const int64_t offset = slot % a.page_size;
    const float scale =
        indexer_scale(amax_of(x, kIndexerDim), a.scale == IndexerScale::kPowerOfTwo);
    quantize_group(x, kIndexerDim, scale, page + offset * kIndexerDim);
    std::memcpy(page + int64_t{a.page_size} * kIndexerDim + offset * sizeof(float), &scale,
                sizeof(float));
  });
  return Status::Ok();
}

}  // namespace mlakit::ops
