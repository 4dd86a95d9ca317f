// Explicit instantiation of the sm80 decode kernel: the V4 cache (sparse), the math and out in
// fp16, TileM32.
#include "backends/sm80/decode_kernel.cuh"

namespace mlakit::sm80 {

const DecodeKernel& decode_kernel_v4_fp16_m32() {
  static constexpr DecodeKernel kEntry =
      decode_kernel_entry<__half, TileM32, /*kFp8=*/true, Fp8Cache::kV4>();
  return kEntry;
}

}  // namespace mlakit::sm80
