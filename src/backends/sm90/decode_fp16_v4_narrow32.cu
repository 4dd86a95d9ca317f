// Explicit instantiation of the sm90 decode kernel: sparse decode of the V4 cache with a fp16 q
// (out alike), the narrow tile of 32 rows.
#include "backends/sm90/decode_kernel.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_fp16_v4_narrow32() {
  return decode_kernel_entry<__half, 32, __half, false, Widen::kV4>();
}

}  // namespace mlakit::sm90
