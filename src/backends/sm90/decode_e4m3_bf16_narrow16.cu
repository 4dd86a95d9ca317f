// Explicit instantiation of the sm90 decode kernel: e4m3 cache, bf16 q and out, the narrow tile of
// 16 rows (decode_fp8_narrow.cuh).
#include "backends/sm90/decode_kernel.cuh"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_e4m3_bf16_narrow16() {
  return decode_kernel_entry<__nv_bfloat16, 16, __nv_bfloat16, /*kFp8Kv=*/true>();
}

}  // namespace mlakit::sm90
