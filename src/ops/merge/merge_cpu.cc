// The cpu reference of merge_partials (mlakit/cp.h): per row, the LSE-weighted sum of the
// partials in fp32 (weights and their sum in fp64), then the sink. Base-2 LSEs (lse_base2) are
// taken to natural log on the way in and back on the way out.
#include <cmath>
#include <limits>
#include <vector>

#include "core/numeric.h"
#include "core/parallel.h"
#include "ops/merge/merge.h"

namespace mlakit::cp {
namespace {

float load(const void* base, int64_t index, DType dtype) {
  switch (dtype) {
    case DType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::kFP16: return fp16_to_float(static_cast<const uint16_t*>(base)[index]);
    default: return static_cast<const float*>(base)[index];
  }
}

void store(void* base, int64_t index, DType dtype, float value) {
  switch (dtype) {
    case DType::kBF16: static_cast<uint16_t*>(base)[index] = float_to_bf16(value); break;
    case DType::kFP16: static_cast<uint16_t*>(base)[index] = float_to_fp16(value); break;
    default: static_cast<float*>(base)[index] = value; break;
  }
}

}  // namespace

void merge_partials_cpu(const MergeArgs& a) {
  const int64_t rows = merge_rows(a), out_stride = out_stride_of(a), lse_stride = lse_stride_of(a);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // Partial k's LSE in natural log (-inf stays -inf).
  auto lse_of = [&](int k, int64_t row) {
    const float l = a.partial_lse[k * lse_stride + row];
    return a.lse_base2 ? l * kLn2 : l;
  };
  parallel_for(rows, [&](int64_t row) {
    float m = kNegInf;
    for (int k = 0; k < a.world; ++k) m = std::fmax(m, lse_of(k, row));
    std::vector<float> acc(kDv, 0.0f);
    float lse = kNegInf, scale = 0.0f;  // every partial empty: out 0, lse -inf
    if (m != kNegInf) {
      double sum = 0.0;
      for (int k = 0; k < a.world; ++k) {
        const float lse_k = lse_of(k, row);
        if (lse_k == kNegInf) continue;  // an empty partial: its out is not read
        const float w = std::exp(lse_k - m);
        sum += w;
        const int64_t at = k * out_stride + row * kDv;
        for (int d = 0; d < kDv; ++d) acc[d] += w * load(a.partial_out, at + d, a.dtype);
      }
      lse = m + static_cast<float>(std::log(sum));
      scale = static_cast<float>(1.0 / sum);
      // out *= exp(lse) / (exp(lse) + exp(sink)) = 1 / (1 + exp(sink - lse))
      if (a.sinks != nullptr) scale /= 1.0f + std::exp(a.sinks[row % a.h_q] - lse);
    }
    for (int d = 0; d < kDv; ++d) store(a.out, row * kDv + d, a.dtype, acc[d] * scale);
    if (a.lse != nullptr) a.lse[row] = a.lse_base2 ? lse * kLog2e : lse;
  });
}

}  // namespace mlakit::cp
