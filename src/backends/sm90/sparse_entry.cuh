// What the sparse kernels with an entry of their own share (the split kernel,
// decode_sparse_v32.cuh; the sparse narrow kernel, decode_sparse_narrow.cuh; the sparse mma kernel,
// decode_sparse_mma.cuh): the CTA shape, which work a CTA does under each schedule (persistent,
// one-shot; cluster for the split kernel), the aligned shared-memory base, the prologue after the
// barriers' initialization and the cluster merge. The host side: the DecodeKernel entry
// (launch.h) of such a kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/sm90/cluster_merge.cuh"
#include "backends/sm90/config.h"
#include "backends/sm90/launch.h"
#include "backends/sm90/params.h"
#include "backends/sm90/trace.cuh"
#include "core/check.h"
#include "core/cuda_check.h"
#include "kernels/common/pdl.h"
#include "kernels/common/ptx.h"
#include "plan/compact.h"
#include "plan/part_plan.cuh"
#include "plan/work.cuh"

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

// Which work a CTA does: its query tile, its index among the CTAs of that tile (the chunk
// iterator's `cta`) and, in the cluster schedule, its split of the request (0..C S - 1).
struct SparseCta {
  int m_tile;
  int32_t cta;
  int32_t split;
};

// Persistent and one-shot: the query tile fastest. Cluster (plan.h; kCluster, a kernel built for
// that schedule alone): blockIdx.x = (request * m_tiles + tile) * C S + split, cta = request * C S
// + split (decode_kernel.cuh's numbering).
template <bool kCluster>
__device__ __forceinline__ SparseCta sparse_cta(const DecodeParams& p, int32_t m_tiles) {
  const auto block = static_cast<int32_t>(blockIdx.x);
  if constexpr (!kCluster) {
    return {.m_tile = static_cast<int>(block % m_tiles), .cta = block / m_tiles, .split = 0};
  }
  const int32_t splits = p.plan.max_splits;  // C S
  const int32_t tile_index = block / splits;
  const int32_t split = block % splits;
  return {.m_tile = static_cast<int>(tile_index % m_tiles),
          .cta = tile_index / m_tiles * splits + split,
          .split = split};
}

// Row `row`'s length (its tokens, before the validity of each index), as the compaction counted it
// or, read directly (DecodeParams::direct_s_q), its request's topk_lens entry or topk.
__device__ __forceinline__ int32_t sparse_row_len(const DecodeParams& p, int32_t row) {
  if (p.direct_s_q == 0) return plan::clamped_len(p.seq_lens, row, p.batch, p.max_len);
  if (row >= p.batch) return 0;
  return p.seq_lens == nullptr ? p.max_len
                               : plan::clamp_len(p.seq_lens[row / p.direct_s_q], p.max_len);
}

// The cluster schedule's chunk iterator for the sparse kernels (plan::ChunkIterator's interface):
// the CTA's one chunk, by sparse_row_len.
class SparseClusterChunks {
 public:
  __device__ __forceinline__ SparseClusterChunks(const DecodeParams& p, int32_t cta)
      : p_(p), cta_(cta) {}
  __device__ __forceinline__ bool next(plan::Chunk* chunk) {
    if (done_) return false;
    done_ = true;
    *chunk = plan::cluster_chunk(p_.plan, cta_, sparse_row_len(p_, cta_ / p_.plan.max_splits));
    return true;
  }

 private:
  const DecodeParams& p_;
  int32_t cta_;
  bool done_ = false;
};

// The chunks of CTA `cta`: the cluster schedule's one (kCluster: SparseClusterChunks, which reads
// the rows' lengths as DecodeParams::direct_s_q says), else plan::ChunkIterator's.
template <bool kCluster>
__device__ __forceinline__ auto sparse_chunks(const DecodeParams& p, SmallStorage& sm,
                                              int32_t cta) {
  if constexpr (kCluster) {
    return SparseClusterChunks(p, cta);
  } else {
    return plan::ChunkIterator(p.plan, p.schedule, cta, p.batch, &sm.part, p.seq_lens, p.max_len);
  }
}

// The cluster schedule's slot of a row's entry `index` (DecodeParams::direct_s_q): -1 when it
// names no cached token (never read; its token is masked), else its token's slot, padded pages by
// their pitch. Compacted slots pass unchanged (direct_tokens INT32_MAX, page size and pitch 1).
__device__ __forceinline__ int32_t direct_slot(const DecodeParams& p, int32_t index) {
  if (index < 0 || index >= p.direct_tokens) return -1;
  return plan::pitched_slot(index, p.direct_page_size, p.direct_page_pitch);
}

// After thread 0 has initialized the barriers: the wait for the previous kernel (everything after
// it reads seq_lens or the plan: the PDL contract, kernels/common/pdl.h), the persistent
// schedule's part of this CTA or, in the cluster schedule with several clusters per request, the
// request's metadata for the combine kernel (no plan kernel runs), the CTA barrier.
template <bool kCluster = false>
__device__ __forceinline__ void sparse_prologue(const DecodeParams& p, SmallStorage& sm,
                                                const SparseCta& at) {
  pdl::griddepcontrol_wait();
  pdl::griddepcontrol_launch_dependents();
  if (p.schedule == plan::Schedule::kPersistent && threadIdx.x < 32) {
    const plan::PartPlan pp = plan::part_for_cta(p, at.cta);
    if (threadIdx.x == 0) sm.part = pp;
  }
  if constexpr (kCluster) {
    const int32_t splits = p.plan.max_splits, size = p.plan.cluster_size;
    if (splits > size && at.m_tile == 0 && at.split == 0 && threadIdx.x == 0) {
      const int32_t request = at.cta / splits, clusters = splits / size;
      p.plan.requests[request] = plan::RequestMeta{.seq_len = sparse_row_len(p, request),
                                                   .num_splits = clusters,
                                                   .first = 0,
                                                   .split_offset = request * clusters};
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) grid_stamp(1);
}

#ifdef MLAKIT_SM90_WGMMA
// The cluster schedule's merge, at the end of each role (one call site per role, nothing after the
// roles' branches): the cluster's CTAs meet once the consumers left the result over the stages
// (write_wide_chunk's merged path, or the sparse mma kernel's); then the kThreads threads that
// call it with `merges` (threads 0 .. kThreads - 1) merge CTA k's rows of all S results
// (cluster_merge.cuh); none leaves while another reads its shared memory. Where the CTA and its
// shared memory stand is worked out again here, so that nothing of it stays live through the
// roles' loops. (ptxas, the split kernel's producer spills in bytes of stores: 60 without a merge;
// 108 with both consumer warpgroups merging after the branches; 76 with the V warpgroup merging;
// 64 with the S warpgroup, whose 192 registers leave most room: kThreads 128 there.)
template <typename T, typename L, int kTileRows, int kThreads>
__device__ __forceinline__ void merge_sparse_cluster(const DecodeParams& p, bool merges) {
  cluster_sync();  // every CTA's result and LSE in its shared memory
  if (merges) {
    extern __shared__ uint8_t smem_raw[];
    uint8_t* base = aligned_smem(smem_raw);
    const SparseCta at = sparse_cta<true>(p, (p.rows + kTileRows - 1) / kTileRows);
    merge_cluster<T, kTileRows, kThreads>(
        p, base + L::kKvOffset, *reinterpret_cast<SmallStorage*>(base + L::kSmallOffset), at.m_tile,
        at.cta / p.plan.max_splits, at.split / p.plan.cluster_size);
  }
  cluster_sync();
}
#endif

// The entry of kernel kKernel (kBlockThreads threads, kSmemBytes of dynamic shared memory),
// launched in clusters of `cluster` CTAs (1: none; more only for a kernel built for the cluster
// schedule, kClustered).
template <auto kKernel, size_t kSmemBytes, int kBlockThreads, bool kClustered = false>
struct SparseEntry {
  static Status prepare() {
    return prepare_kernel(reinterpret_cast<const void*>(kKernel), kSmemBytes);
  }
  static Status launch(const DecodeParams& p, dim3 grid, int cluster, cudaStream_t stream,
                       bool pdl) {
    if (!kClustered && cluster != 1) {
      return Status(StatusCode::kInternal, "a sparse kernel without a cluster schedule clustered");
    }
    trace_print_at_exit();
    MLAKIT_CUDA_RETURN(pdl::launch_clustered(kKernel, grid, dim3(kBlockThreads), kSmemBytes, stream,
                                             pdl, static_cast<unsigned>(cluster), p));
    return Status::Ok();
  }
  static Status max_active_clusters(int cluster, int* count) {
    return count_active_clusters(reinterpret_cast<const void*>(kKernel), kBlockThreads, kSmemBytes,
                                 cluster, count);
  }
  static const DecodeKernel& entry() {
    static constexpr DecodeKernel kEntry{
        .prepare = prepare, .launch = launch, .max_active_clusters = max_active_clusters};
    return kEntry;
  }
};

}  // namespace mlakit::sm90
