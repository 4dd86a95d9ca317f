// Explicit instantiation of the sm90 sparse narrow kernel of the V3.2 cache with a fp16 q (out
// alike), tiles of 16 rows (decode_sparse_narrow.cuh).
#include "backends/sm90/decode_sparse_narrow.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_fp16_snarrow16() {
  return sparse_narrow_kernel_entry<__half, 16>();
}

}  // namespace mlakit::sm90
