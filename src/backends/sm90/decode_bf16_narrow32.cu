// Explicit instantiation of the sm90 decode kernel: bf16 q/kv/out, the narrow tile of 32 rows.
#include "backends/sm90/decode_kernel.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_bf16_narrow32() {
  return decode_kernel_entry<__nv_bfloat16, 32>();
}

}  // namespace mlakit::sm90
