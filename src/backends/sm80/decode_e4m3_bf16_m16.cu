// Explicit instantiation of the sm80 decode kernel: e4m3 cache, the math and out in bf16 (q bf16 or
// e4m3), TileM16Fp8.
#include "backends/sm80/decode_kernel.cuh"

namespace mlakit::sm80 {

const DecodeKernel& decode_kernel_e4m3_bf16_m16() {
  static constexpr DecodeKernel kEntry =
      decode_kernel_entry<__nv_bfloat16, TileM16Fp8, /*kFp8=*/true>();
  return kEntry;
}

}  // namespace mlakit::sm80
