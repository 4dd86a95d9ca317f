// The scale rules of the cache-append ops, shared by the cpu reference and the CUDA kernels so
// that both compute the same bits (include/mlakit/ops.h states the rules).
//
// ceil(log2(x)) is taken from x's exponent and mantissa bits, exactly: a float log2 rounds
// (log2f(2^k * (1 + 2^-23)) is k in float), which would pick a scale one power of two too small
// and saturate the group's largest value.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MLAKIT_OPS_HD __host__ __device__ __forceinline__
#else
#define MLAKIT_OPS_HD inline
#endif

namespace mlakit::ops {

inline constexpr float kE4m3Max = 448.0f;
inline constexpr float kIndexerMinAmax = 1e-4f;  // vLLM's floor under the indexer key's amax

MLAKIT_OPS_HD uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
#endif
}

MLAKIT_OPS_HD float float_of(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof(x));
  return x;
#endif
}

// ceil(log2(x)) for a finite x > 0, exact (subnormals included); -149 for a zero.
MLAKIT_OPS_HD int ceil_log2(float x) {
  const uint32_t b = bits_of(x);
  const int biased = static_cast<int>((b >> 23) & 0xff);
  const uint32_t mantissa = b & 0x7fffffu;
  if (biased == 0) {  // subnormal: x = mantissa * 2^-149
    if (mantissa == 0) return -149;
    int e = -149;
    int top = 31;
    while (!(mantissa >> top)) --top;  // the highest set bit
    e += top;
    return (mantissa & ((1u << top) - 1)) ? e + 1 : e;
  }
  return biased - 127 + (mantissa != 0 ? 1 : 0);
}

// 2^e as a float, e clamped to [-149, 127].
MLAKIT_OPS_HD float pow2(int e) {
  e = e < -149 ? -149 : (e > 127 ? 127 : e);
  if (e >= -126) return float_of(static_cast<uint32_t>(e + 127) << 23);
  return float_of(1u << (e + 149));
}

// The V3.2 blockwise layout's group scale: 2^ceil(log2(amax / 448)), 1 when amax is 0 (or NaN).
MLAKIT_OPS_HD float blockwise_scale(float amax) {
  if (!(amax > 0.0f)) return 1.0f;
  return pow2(ceil_log2(amax / kE4m3Max));
}

// The V4 layout's UE8M0 exponent: clamp(127 + ceil(log2(amax / 448)), 0, 254), 127 when amax
// is 0 (or NaN).
MLAKIT_OPS_HD uint8_t v4_exponent(float amax) {
  if (!(amax > 0.0f)) return 127;
  int e = 127 + ceil_log2(amax / kE4m3Max);
  e = e < 0 ? 0 : (e > 254 ? 254 : e);
  return static_cast<uint8_t>(e);
}

// The indexer key's scale: max(amax, 1e-4) / 448, optionally rounded up to a power of two.
MLAKIT_OPS_HD float indexer_scale(float amax, bool power_of_two) {
  const float s = (amax > kIndexerMinAmax ? amax : kIndexerMinAmax) / kE4m3Max;
  return power_of_two ? pow2(ceil_log2(s)) : s;
}

// float -> bf16 bits, round to nearest even (core/numeric.h's float_to_bf16, usable on device).
MLAKIT_OPS_HD uint16_t bf16_bits(float f) {
  uint32_t b = bits_of(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40);
  b += 0x7fff + ((b >> 16) & 1);
  return static_cast<uint16_t>(b >> 16);
}

}  // namespace mlakit::ops
