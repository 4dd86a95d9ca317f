// Explicit instantiation of the sm90 sparse narrow kernel of the V3.2 cache with a bf16 q (out
// alike), tiles of 32 rows (decode_sparse_narrow.cuh).
#include "backends/sm90/decode_sparse_narrow.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_bf16_snarrow32() {
  return sparse_narrow_kernel_entry<__nv_bfloat16, 32>();
}

}  // namespace mlakit::sm90
