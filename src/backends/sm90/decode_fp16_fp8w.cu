// Explicit instantiation of the sm90 decode kernel: the one-scale e4m3 cache with a fp16 q (out
// alike) on the wide tile, the cache widened in shared memory (Widen::kFp8).
#include "backends/sm90/decode_kernel.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_e4m3_fp16_wide() {
  return decode_kernel_entry<__half, kRows, __half, false, Widen::kFp8>();
}

}  // namespace mlakit::sm90
