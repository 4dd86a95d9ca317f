// Explicit instantiation of the sm90 split sparse kernel of the V3.2 cache with an fp16 q (out
// alike; decode_sparse_v32.cuh).
#include "backends/sm90/decode_sparse_v32.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_fp16_sv32() { return sparse_v32_kernel_entry<__half, false>(); }

}  // namespace mlakit::sm90
