// Explicit instantiation of the sm80 decode kernel: e4m3 cache, the math and out in fp16 (q fp16 or
// e4m3), TileM32.
#include "backends/sm80/decode_kernel.cuh"

namespace mlakit::sm80 {

const DecodeKernel& decode_kernel_e4m3_fp16_m32() {
  static constexpr DecodeKernel kEntry = decode_kernel_entry<__half, TileM32, /*kFp8=*/true>();
  return kEntry;
}

}  // namespace mlakit::sm80
