// Explicit instantiation of the sm90 decode kernel: sparse decode of the 16-bit and V3.2 caches
// with a fp16 q on the wide tile (64 rows) (Widen::kGather: the gather and the V3.2 widening are
// compiled only in these kernels, decode_kernel.cuh).
#include "backends/sm90/decode_kernel.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_fp16_gather() {
  return decode_kernel_entry<__half, kRows, __half, false, Widen::kGather>();
}

}  // namespace mlakit::sm90
