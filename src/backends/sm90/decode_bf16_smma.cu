// The sm90 sparse mma kernel of the V3.2 cache with a bf16 q (out alike), up to 16 query rows
// (decode_sparse_mma.cuh).
#include "backends/sm90/decode_sparse_mma.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

namespace {

Status sparse_mma_max_active_clusters(int, int* count) {
  *count = 0;
  return Status::Ok();
}

}  // namespace

const DecodeKernel& decode_kernel_bf16_smma() {
  static constexpr DecodeKernel kEntry{.prepare = prepare_sparse_mma,
                                       .launch = launch_sparse_mma,
                                       .max_active_clusters = sparse_mma_max_active_clusters};
  return kEntry;
}

}  // namespace mlakit::sm90
