// The sm90 sparse mma kernel of the V3.2 cache with a bf16 q under the cluster schedule
// (decode_sparse_mma.cuh; a file of its own so that the two instantiations compile in parallel).
#include "backends/sm90/decode_sparse_mma.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_bf16_smma_cluster() {
  return SparseEntry<sparse_mma_kernel<true>, SparseMmaLayout::kSmemBytes, kSparseThreads,
                     /*kClustered=*/true>::entry();
}

}  // namespace mlakit::sm90
