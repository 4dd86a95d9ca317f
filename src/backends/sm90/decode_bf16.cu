// Explicit instantiation of the sm90 decode kernel: bf16 q/kv/out.
#include "backends/sm90/decode_kernel.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_bf16() {
  static constexpr DecodeKernel kEntry{.prepare = prepare_decode<__nv_bfloat16>,
                                       .launch = launch_decode<__nv_bfloat16>,
                                       .max_active_clusters = max_active_clusters<__nv_bfloat16>};
  return kEntry;
}

}  // namespace mlakit::sm90
