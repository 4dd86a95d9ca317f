// Device-side helpers for the 16-bit storage types: packing two floats into one 32-bit register
// of bf16 or fp16 (round to nearest even), and the warp reductions and exchanges used by the
// epilogues.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/numeric.h"

namespace mlakit {

// Two floats as one 32-bit register of T (the low half holds `lo`).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The four lanes of a quad (lane % 4 = q) hold v[j] = M[q][j]; afterwards v[j] = M[j][q]. Two
// rounds of exchanges with the lanes q ^ 1 and q ^ 2, one shuffle per value; every lane of the
// warp takes part. For the mma accumulator layout (a row's four lanes hold 2 adjacent columns of
// every 8): with v[j] the packed pair of column block 4g + j, lane q then holds the 8 columns of
// block 4g + q, one 16-byte store.
__device__ __forceinline__ void quad_transpose(uint32_t (&v)[4], int q) {
#pragma unroll
  for (int m = 1; m <= 2; m *= 2) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if ((j & m) != 0) continue;
      const bool upper = (q & m) != 0;
      const uint32_t got = __shfl_xor_sync(0xffffffffu, upper ? v[j] : v[j | m], m);
      if (upper) {
        v[j] = got;
      } else {
        v[j | m] = got;
      }
    }
  }
}

}  // namespace mlakit
