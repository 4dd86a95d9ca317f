// Explicit instantiation of the sm90 decode kernel: e4m3 cache and q, fp16 out, the in-step wide
// tile of 64 rows (Widen::kInStep, decode_fp8_instep.cuh).
#include "backends/sm90/decode_kernel.cuh"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_e4m3_e4m3_fp16_instep() {
  return decode_kernel_entry<uint8_t, kRows, __half, /*kFp8Kv=*/true, Widen::kInStep>();
}

}  // namespace mlakit::sm90
