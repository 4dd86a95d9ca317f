// Explicit instantiation of the sm90 split sparse kernel of the V3.2 cache with a bf16 q (out
// alike) under the cluster schedule (decode_sparse_v32.cuh; a file of its own so that the two
// instantiations compile in parallel).
#include "backends/sm90/decode_sparse_v32.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_bf16_sv32_cluster() {
  return sparse_v32_kernel_entry<__nv_bfloat16, true>();
}

}  // namespace mlakit::sm90
