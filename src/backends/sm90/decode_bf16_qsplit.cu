// Explicit instantiation of the sm90 decode kernel: the one-scale e4m3 cache with a bf16 q (out
// alike) split into two e4m3 parts on the e4m3 wide tile (Widen::kQSplit, decode_fp8_wide.cuh).
#include "backends/sm90/decode_kernel.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_e4m3_bf16_qsplit() {
  return decode_kernel_entry<uint8_t, kRows, __nv_bfloat16, /*kFp8Kv=*/true, Widen::kQSplit>();
}

}  // namespace mlakit::sm90
