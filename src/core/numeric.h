// Host-side conversions between float and the 16- and 8-bit storage types. Bit-exact with the
// CUDA intrinsics: round-to-nearest-even, NaN preserved, e4m3fn saturates to +-448 on encode.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mlakit {

inline constexpr float kLog2e = 1.4426950408889634f;  // log2(e): natural log -> base 2
inline constexpr float kLn2 = 0.6931471805599453f;    // ln(2): base 2 -> natural log

inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

inline float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t{h} << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t bits = float_to_bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float v = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t bits = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  if (std::isnan(f)) return sign | 0x7e00u;
  const float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00u;           // rounds to infinity
  if (a < 6.103515625e-05f) {                         // subnormal range: multiples of 2^-24
    const float q = std::nearbyint(a * 16777216.0f);  // ties to even (default rounding mode)
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t abits = float_to_bits(a);
  abits += 0xfff + ((abits >> 13) & 1);
  const uint32_t exponent = (abits >> 23) - 112;
  return sign | static_cast<uint16_t>((exponent << 10) | ((abits >> 13) & 0x3ffu));
}

// fp8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; 0x7f/0xff are NaN; no infinity.
inline float e4m3_to_float(uint8_t v) {
  const bool negative = v & 0x80;
  const int exponent = (v >> 3) & 0xf;
  const int mantissa = v & 0x7;
  float r;
  if (exponent == 0xf && mantissa == 0x7) {
    r = NAN;
  } else if (exponent == 0) {
    r = std::ldexp(static_cast<float>(mantissa), -9);
  } else {
    r = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  }
  return negative ? -r : r;
}

inline uint8_t float_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;  // saturate to the largest finite value
  // Round to the nearest representable value, ties to even, by scanning the 127 magnitudes.
  int exponent;
  std::frexp(a, &exponent);  // a = m * 2^exponent, m in [0.5, 1)
  int e = exponent - 1;      // a in [2^e, 2^(e+1))
  if (e < -6) e = -6;        // subnormals share the spacing of the smallest normal binade
  const float step = std::ldexp(1.0f, e - 3);
  const float q = std::nearbyint(a / step);
  const float r = q * step;
  // Encode r (exact in e4m3 by construction).
  if (r == 0.0f) return sign;
  int re;
  std::frexp(r, &re);
  re -= 1;
  if (re < -6) return sign | static_cast<uint8_t>(r / std::ldexp(1.0f, -9));  // subnormal
  const int mant = static_cast<int>(r / std::ldexp(1.0f, re - 3)) - 8;
  return sign | static_cast<uint8_t>(((re + 7) << 3) | mant);
}

// UE8M0 (the scales of the V4 cache layout): an unsigned power of two, 2^(e - 127); 0xff is NaN.
inline float ue8m0_to_float(uint8_t e) {
  return e == 0xff ? NAN : std::ldexp(1.0f, static_cast<int>(e) - 127);
}

}  // namespace mlakit
