// The sm90 sparse mma kernel of the V3.2 cache with a bf16 q (out alike), up to 16 query rows
// (decode_sparse_mma.cuh).
#include "backends/sm90/decode_sparse_mma.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_bf16_smma() {
  return SparseEntry<sparse_mma_kernel<false>, SparseMmaLayout::kSmemBytes,
                     kSparseThreads>::entry();
}

}  // namespace mlakit::sm90
