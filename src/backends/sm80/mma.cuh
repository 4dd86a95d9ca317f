// mma.sync m16n8k16 by input dtype (fp32 accumulate), for templates over T.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/common/ptx.h"

namespace mlakit::sm80 {

template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1);

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                            uint32_t b0, uint32_t b1) {
  ptx::mma_sync_m16n8k16_f32_bf16(d, a, b0, b1);
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&d)[4], const uint32_t (&a)[4],
                                                     uint32_t b0, uint32_t b1) {
  ptx::mma_sync_m16n8k16_f32_f16(d, a, b0, b1);
}

}  // namespace mlakit::sm80
