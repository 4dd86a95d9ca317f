// Explicit instantiation of the sm90 decode kernel: sparse decode of the 16-bit and V3.2 caches
// with a bf16 q on the narrow tile of 32 rows (Widen::kGather: the gather and the V3.2 widening are
// compiled only in these kernels, decode_kernel.cuh).
#include "backends/sm90/decode_kernel.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_bf16_gather_narrow32() {
  return decode_kernel_entry<__nv_bfloat16, 32, __nv_bfloat16, false, Widen::kGather>();
}

}  // namespace mlakit::sm90
