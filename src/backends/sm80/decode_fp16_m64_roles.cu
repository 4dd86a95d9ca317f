// Explicit instantiation of the sm80 decode kernel: fp16 q/kv/out, TileM64Roles.
#include "backends/sm80/decode_kernel.cuh"

namespace mlakit::sm80 {

const DecodeKernel& decode_kernel_fp16_m64_roles() {
  static constexpr DecodeKernel kEntry = decode_kernel_entry<__half, TileM64Roles>();
  return kEntry;
}

}  // namespace mlakit::sm80
