// fp8 (e4m3) helpers shared by the decode kernels: the dequantization scales read at run time,
// the widening of e4m3 values to bf16 / fp16 in registers, byte transposes for operands that the
// tensor cores need k-contiguous, and the narrowing of probabilities to e4m3.
//
// Widening is exact (every e4m3 value is a bf16 and an fp16 value) and uses integer and
// half-precision SIMD instructions: the hardware conversion (cvt.rn.f16x2.e4m3x2, sm_89) runs at a
// quarter of the integer rate on Hopper, and the decode kernels widen every cached value once or
// twice per query tile. The exception is sm90's sparse mma kernel, bound by the instructions it
// issues more than by any pipe: it converts to fp16 by the hardware (widen4_f16_cvt). An e4m3
// NaN (0x7f, 0xff) widens to +-480, not NaN: caches written by a quantizer hold no NaN, and the
// kernels never read the tokens past a request's length.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/numeric.cuh"
#include "plan/decode_params.h"

namespace mlakit::fp8 {

// prmt.b32 d, a, b, sel (sm_20): byte i of d is byte (sel >> 4i) & 7 of {b, a} (a: bytes 0-3).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  return __byte_perm(a, b, sel);
}

// The two e4m3 values in bytes 1 and 3 of y (bytes 0 and 2 are ignored) as two T (bf16 or fp16)
// in one register: byte 1 in the low half. The e4m3 sign goes to bit 15 of its half; its 7
// exponent and mantissa bits go below the sign so that the half reads as the value times a power
// of two (2^-120 for bf16, 2^-8 for fp16), undone by one exact multiplication.
template <typename T>
__device__ __forceinline__ uint32_t widen_odd_bytes(uint32_t y) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const uint32_t bits = ((y >> 4) & 0x07f007f0u) | (y & 0x80008000u);
    const __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&bits),
                                     __floats2bfloat162_rn(0x1.0p120f, 0x1.0p120f));
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    static_assert(std::is_same_v<T, __half>);
    const uint32_t bits = ((y >> 1) & 0x3f803f80u) | (y & 0x80008000u);
    const __half2 v =
        __hmul2(*reinterpret_cast<const __half2*>(&bits), __floats2half2_rn(256.0f, 256.0f));
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// The two e4m3 values in bytes 0 and 1 of v as two T (byte 0 in the low half).
template <typename T>
__device__ __forceinline__ uint32_t widen_low_pair(uint32_t v) {
  return widen_odd_bytes<T>(prmt(v, v, 0x1000));
}

// Four e4m3 values (byte i = value i) as four T: lo = values 0, 1; hi = values 2, 3.
template <typename T>
__device__ __forceinline__ void widen4(uint32_t w, uint32_t& lo, uint32_t& hi) {
  lo = widen_odd_bytes<T>(prmt(w, w, 0x1000));
  hi = widen_odd_bytes<T>(prmt(w, w, 0x3020));
}

// Four e4m3 values (byte i = value i) as four fp16 by the hardware conversion
// (cvt.rn.f16x2.e4m3x2, sm_89; exact): lo = values 0, 1; hi = values 2, 3 (the lower value in
// the low half). Two instructions (the halves split by mov.b32 inside the asm: ptxas then reads
// the high one as an operand half, where a shift in C++ costs an instruction) where widen4 takes
// ten, on a pipe of a quarter of the integer rate: for consumers that issue more than they
// convert (sm90's sparse mma kernel).
__device__ __forceinline__ void widen4_f16_cvt(uint32_t w, uint32_t& lo, uint32_t& hi) {
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\n"
      "cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
}

// A UE8M0 scale: 2^(e - 127); 0xff is NaN (as the cpu backend's ue8m0_to_float).
__device__ __forceinline__ float ue8m0(uint32_t e) {
  return e == 0xffu ? __uint_as_float(0x7fc00000u)
         : e == 0u  ? __uint_as_float(0x00400000u)
                    : __uint_as_float(e << 23);
}

// Four e4m3 values (byte i = value i) times `scale` as four T (lo = values 0, 1; hi = values 2,
// 3), each rounded once (through fp32): the per-group scales of the blockwise caches.
template <typename T>
__device__ __forceinline__ void dequant4(uint32_t w, float scale, uint32_t& lo, uint32_t& hi) {
  uint32_t a, b;
  widen4<__half>(w, a, b);
  const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&a));
  const float2 y = __half22float2(*reinterpret_cast<const __half2*>(&b));
  lo = pack2<T>(x.x * scale, x.y * scale);
  hi = pack2<T>(y.x * scale, y.y * scale);
}

// Transposes a 4 x 4 matrix of bytes: x[j] holds row j (byte i = column i); afterwards y[i] holds
// column i (byte j = row j). Eight byte permutes.
__device__ __forceinline__ void transpose4x4(const uint32_t (&x)[4], uint32_t (&y)[4]) {
  const uint32_t t0 = prmt(x[0], x[1], 0x5140);  // x0.b0 x1.b0 x0.b1 x1.b1
  const uint32_t t1 = prmt(x[2], x[3], 0x5140);
  const uint32_t t2 = prmt(x[0], x[1], 0x7362);  // x0.b2 x1.b2 x0.b3 x1.b3
  const uint32_t t3 = prmt(x[2], x[3], 0x7362);
  y[0] = prmt(t0, t1, 0x5410);
  y[1] = prmt(t0, t1, 0x7632);
  y[2] = prmt(t2, t3, 0x5410);
  y[3] = prmt(t2, t3, 0x7632);
}

// Two floats as two e4m3 in the low 16 bits (lo in byte 0), round to nearest even, saturated to
// +-448. cvt.rn.satfinite.e4m3x2.f32 (sm_89).
__device__ __forceinline__ uint16_t narrow2(float lo, float hi) {
  uint16_t d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
}

// Two e4m3 in the low 16 bits (byte 0 the low one) as two floats, exactly:
// cvt.rn.f16x2.e4m3x2 (sm_89), for the few values that need the hardware conversion (the split of
// a bf16 q and of P, Widen::kQSplit).
__device__ __forceinline__ float2 widen2_f32(uint16_t v) {
  uint32_t h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(v));
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// The split of a bf16 q into two e4m3 parts (sm90 pack_q.h, split_q; the narrow tile's own split
// in decode_fp8_narrow.cuh). split_exponent: e with amax = m 2^e, m in [0.5, 1), so that the row
// times 2^(8 - e) has its largest magnitude in [128, 256); clamped so that 2^(8 - e) and 2^(e - 8)
// stay normal floats (a row that small or large is zeros or saturates); 8 for a row of zeros or
// with an infinity or NaN (the row unscaled).
__device__ __forceinline__ int split_exponent(float amax) {
  int e = 0;
  (void)frexpf(amax, &e);
  return amax > 0.0f && isfinite(amax) ? min(max(e, -110), 118) : 8;
}

// Two scaled values as their e4m3 high parts (the mantissas cut to e4m3's 3 bits, then exact in
// e4m3 where normal) and residuals (the value minus its high part, rounded to e4m3), value 0 in
// byte 0 of each.
__device__ __forceinline__ void split2(float a0, float a1, uint16_t& hi, uint16_t& lo) {
  const auto cut = [](float a) { return __uint_as_float(__float_as_uint(a) & 0xfff00000u); };
  hi = narrow2(cut(a0), cut(a1));
  const float2 b = widen2_f32(hi);
  lo = narrow2(a0 - b.x, a1 - b.y);
}

// The dequantization scales of one call, read once per CTA after griddepcontrol.wait (a scale
// behind a pointer may be written by the previous kernel): qk multiplies the scores (q_scale *
// k_scale), v the outputs (k_scale, the cache's single scale). 1 for 16-bit inputs. q alone
// (q_scale) is for the V3.2 and V4 caches, whose k_scale scales only the fp8 NoPE part, not the
// bf16 RoPE part.
struct Scales {
  float qk;
  float v;
  float q;
};

__device__ __forceinline__ Scales read_scales(const plan::DecodeParamsBase& p) {
  const float q = p.q_scale_ptr != nullptr ? *p.q_scale_ptr : p.q_scale;
  const float k = p.k_scale_ptr != nullptr ? *p.k_scale_ptr : p.k_scale;
  return {q * k, k, q};
}

}  // namespace mlakit::fp8
