// Explicit instantiation of the sm90 decode kernel: sparse decode of the V4 cache with a bf16 q
// (out alike).
#include "backends/sm90/decode_kernel.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_bf16_v4() {
  return decode_kernel_entry<__nv_bfloat16, kRows, __nv_bfloat16, false, Widen::kV4>();
}

}  // namespace mlakit::sm90
