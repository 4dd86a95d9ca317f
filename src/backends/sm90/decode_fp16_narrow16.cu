// Explicit instantiation of the sm90 decode kernel: fp16 q/kv/out, the narrow tile of 16 rows.
#include "backends/sm90/decode_kernel.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_fp16_narrow16() { return decode_kernel_entry<__half, 16>(); }

}  // namespace mlakit::sm90
