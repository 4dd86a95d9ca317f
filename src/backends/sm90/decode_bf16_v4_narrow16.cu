// Explicit instantiation of the sm90 decode kernel: sparse decode of the V4 cache with a bf16 q
// (out alike), the narrow tile of 16 rows.
#include "backends/sm90/decode_kernel.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_bf16_v4_narrow16() {
  return decode_kernel_entry<__nv_bfloat16, 16, __nv_bfloat16, false, Widen::kV4>();
}

}  // namespace mlakit::sm90
