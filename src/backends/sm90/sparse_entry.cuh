// What the sparse kernels with an entry of their own share (the split kernel,
// decode_sparse_v32.cuh; the sparse narrow kernel, decode_sparse_narrow.cuh; the sparse mma kernel,
// decode_sparse_mma.cuh): their schedules are persistent and one-shot, never clustered. The device
// side: the aligned shared-memory base and the prologue after the barriers' initialization. The
// host side: the DecodeKernel entry (launch.h) of such a kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/sm90/config.h"
#include "backends/sm90/launch.h"
#include "backends/sm90/params.h"
#include "backends/sm90/trace.cuh"
#include "core/check.h"
#include "core/cuda_check.h"
#include "kernels/common/pdl.h"
#include "kernels/common/ptx.h"
#include "plan/part_plan.cuh"

namespace mlakit::sm90 {

// The sparse kernels' CTA: two consumer warpgroups and a producer of two warpgroups. A warp's
// stream of random 656-byte rows runs at a fixed rate on the H200 whatever its depth: 4 warps an
// SM gather ~2.0 TB/s, 8 ~3.1, 16 ~3.4 (bench/micro/gather_copy_rate.cu, 2026-11-28).
inline constexpr int kSparseProducerWarps = 8;
inline constexpr int kSparseProducerThreads = 32 * kSparseProducerWarps;
inline constexpr int kSparseThreads = kConsumerThreads + kSparseProducerThreads;  // 512
// Registers after setmaxnreg of the two consumer warpgroups and the producer's threads, within
// what the CTA starts with (65536 / 512 = 128 a thread).
constexpr bool fits_sparse_launch(int consumer0, int consumer1, int producer) {
  return 128 * (consumer0 + consumer1) + kSparseProducerThreads * producer <=
         kSparseThreads * (65536 / kSparseThreads / 8 * 8);
}

// The first 1024-aligned byte of the dynamic shared memory (the swizzled tiles need it; the
// allocation has 1024 bytes to spare).
__device__ __forceinline__ uint8_t* aligned_smem(uint8_t* smem_raw) {
  const uint32_t raw = ptx::smem_u32(smem_raw);
  return smem_raw + (((raw + 1023) & ~1023u) - raw);
}

// After thread 0 has initialized the barriers: the wait for the previous kernel (everything after
// it reads seq_lens or the plan: the PDL contract, kernels/common/pdl.h), the persistent
// schedule's part of this CTA, the CTA barrier.
__device__ __forceinline__ void sparse_prologue(const DecodeParams& p, SmallStorage& sm,
                                                int32_t cta) {
  pdl::griddepcontrol_wait();
  pdl::griddepcontrol_launch_dependents();
  if (p.schedule == plan::Schedule::kPersistent && threadIdx.x < 32) {
    const plan::PartPlan pp = plan::part_for_cta(p, cta);
    if (threadIdx.x == 0) sm.part = pp;
  }
  __syncthreads();
  if (threadIdx.x == 0) grid_stamp(1);
}

// The entry of kernel kKernel (kBlockThreads threads, kSmemBytes of dynamic shared memory, no
// cluster).
template <auto kKernel, size_t kSmemBytes, int kBlockThreads>
struct UnclusteredEntry {
  static Status prepare() {
    return prepare_kernel(reinterpret_cast<const void*>(kKernel), kSmemBytes);
  }
  static Status launch(const DecodeParams& p, dim3 grid, int cluster, cudaStream_t stream,
                       bool pdl) {
    if (cluster != 1) return Status(StatusCode::kInternal, "a sparse kernel runs without clusters");
    trace_print_at_exit();
    MLAKIT_CUDA_RETURN(
        pdl::launch_clustered(kKernel, grid, dim3(kBlockThreads), kSmemBytes, stream, pdl, 1u, p));
    return Status::Ok();
  }
  static Status max_active_clusters(int cluster, int* count) {
    *count = cluster == 1 ? 1 : 0;
    return Status::Ok();
  }
  static const DecodeKernel& entry() {
    static constexpr DecodeKernel kEntry{
        .prepare = prepare, .launch = launch, .max_active_clusters = max_active_clusters};
    return kEntry;
  }
};

}  // namespace mlakit::sm90
