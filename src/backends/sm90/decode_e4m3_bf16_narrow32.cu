// Explicit instantiation of the sm90 decode kernel: e4m3 cache, bf16 q and out, the narrow tile of
// 32 rows (decode_fp8_narrow.cuh).
#include "backends/sm90/decode_kernel.cuh"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_e4m3_bf16_narrow32() {
  return decode_kernel_entry<__nv_bfloat16, 32, __nv_bfloat16, /*kFp8Kv=*/true>();
}

}  // namespace mlakit::sm90
