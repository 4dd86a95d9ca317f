// Explicit instantiation of the sm90 decode kernel: fp16 q/kv/out.
#include "backends/sm90/decode_kernel.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_fp16() {
  static constexpr DecodeKernel kEntry{.prepare = prepare_decode<__half>,
                                       .launch = launch_decode<__half>,
                                       .max_active_clusters = max_active_clusters<__half>};
  return kEntry;
}

}  // namespace mlakit::sm90
