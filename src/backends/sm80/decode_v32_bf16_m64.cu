// Explicit instantiation of the sm80 decode kernel: the V3.2 blockwise cache (sparse), the math and
// out in bf16, TileM64.
#include "backends/sm80/decode_kernel.cuh"

namespace mlakit::sm80 {

const DecodeKernel& decode_kernel_v32_bf16_m64() {
  static constexpr DecodeKernel kEntry =
      decode_kernel_entry<__nv_bfloat16, TileM64, /*kFp8=*/true, Fp8Cache::kBlockwise>();
  return kEntry;
}

}  // namespace mlakit::sm80
