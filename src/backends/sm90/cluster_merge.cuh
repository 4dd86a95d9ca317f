// The cluster schedule's merge (plan.h, tactic 2 of the sm90 backend): the S CTAs of a cluster
// computed S chunks of one request for the same query tile (R = 64 rows, or 16 / 32 for the narrow
// tile); each left its result normalized by its own softmax sum (fp32, over its free KV stages)
// and its LSE per row in shared memory.
// After a cluster barrier CTA k merges rows [Rk / S, R(k + 1) / S) through distributed shared
// memory: first the weights of each row (one thread per row: the S LSEs, the merged LSE, the sink
// factor), then every float4 of the rows from the S results. The combine kernel's arithmetic
// (kernels/common/combine.cu), without partials in global memory; or, when the request's tile
// spans C > 1 clusters, the cluster's partial (normalized, LSE, no sinks) for the combine kernel.
#pragma once

#include <cuda/ptx>

#include "backends/sm90/config.h"
#include "backends/sm90/params.h"
#include "backends/sm90/wgmma.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/ptx.h"

namespace mlakit::sm90 {

#ifdef MLAKIT_SM90_WGMMA

// Named barrier of the 256 consumer threads inside the merge (0 is __syncthreads, 1 the
// epilogue's).
inline constexpr int kMergeBarrier = 2;

// All threads of the cluster (release, then acquire).
__device__ __forceinline__ void cluster_sync() {
  cuda::ptx::barrier_cluster_arrive(cuda::ptx::sem_release);
  cuda::ptx::barrier_cluster_wait(cuda::ptx::sem_acquire);
}

// Called by the 256 consumer threads between two cluster barriers. kv: this CTA's KV stages (its
// result); request, m_tile and cluster (c of C): the cluster's.
template <typename T, int kTileRows>
__device__ __forceinline__ void merge_cluster(const DecodeParams& p, const uint8_t* kv,
                                              SmallStorage& sm, int m_tile, int32_t request,
                                              int32_t cluster) {
  const int splits = p.plan.cluster_size;
  const int32_t clusters = p.plan.max_splits / splits;
  // The output, or with several clusters per request this cluster's partial slot.
  const int64_t first_row = int64_t{clusters > 1 ? request * clusters + cluster : request} * p.rows;
  const int rank = static_cast<int>(cuda::ptx::get_sreg_cluster_ctarank());
  const int row_begin = rank * kTileRows / splits;
  const int row_end = (rank + 1) * kTileRows / splits;
  const int tid = static_cast<int>(threadIdx.x);
  // Rows written: all of a partial's; of out, the request's (var_q: up to its q_len).
  const int32_t live = clusters > 1 ? p.rows : p.out_view.live_rows(request, p.rows);
  // 1. Per row: the merged LSE and each result's weight, exp(lse_k - lse) times the sink factor.
  if (tid < row_end - row_begin) {
    const int row = row_begin + tid;
    const int32_t r = m_tile * kTileRows + row;
    const uint32_t lse_at = ptx::smem_u32(&sm.merge_lse[row]);
    float lse_k[kMaxClusterCtas];
    float max_lse = -INFINITY;
#pragma unroll
    for (int k = 0; k < kMaxClusterCtas; ++k) {
      lse_k[k] =
          k < splits ? ptx::ld_shared_cluster_f32(ptx::mapa_shared_cluster(lse_at, k)) : -INFINITY;
      max_lse = fmaxf(max_lse, lse_k[k]);
    }
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxClusterCtas; ++k) {
      lse_k[k] = max_lse == -INFINITY ? 0.0f : __expf(lse_k[k] - max_lse);
      sum += lse_k[k];
    }
    const float lse = max_lse == -INFINITY ? -INFINITY : max_lse + logf(sum);
    float scale = max_lse == -INFINITY ? 0.0f : 1.0f / sum;
    if (clusters == 1 && r < p.rows && p.sinks != nullptr && lse != -INFINITY) {
      scale /= 1.0f + expf(p.sinks[r % p.h_q] - lse);
    }
#pragma unroll
    for (int k = 0; k < kMaxClusterCtas; ++k) sm.merge_weight[row][k] = lse_k[k] * scale;
    if (r < p.rows) {
      if (clusters > 1) {
        p.plan.partial_lse[first_row + r] = lse;
      } else if (p.lse != nullptr && r < live) {
        p.lse[p.out_view.lse_index(request, r, p.rows)] = lse * p.lse_scale;  // natural or base 2
      }
    }
  }
  asm volatile("bar.sync %0, %1;\n" ::"n"(kMergeBarrier), "n"(kConsumerThreads) : "memory");
  // 2. Every float4 of the rows: the weighted sum of the S results.
  const uint32_t buf = ptx::smem_u32(kv);
  constexpr int kFloat4s = kDv / 4;
  for (int idx = tid; idx < (row_end - row_begin) * kFloat4s; idx += kConsumerThreads) {
    const int row = row_begin + idx / kFloat4s;
    const int col4 = idx % kFloat4s;
    const int32_t r = m_tile * kTileRows + row;
    if (r >= live) continue;
    const uint32_t at = buf + 4 * (row * kMergeStride + 4 * col4);
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int k = 0; k < splits; ++k) {
      const float w = sm.merge_weight[row][k];
      const float4 v = ptx::ld_shared_cluster_v4_f32(ptx::mapa_shared_cluster(at, k));
      acc.x += w * v.x;
      acc.y += w * v.y;
      acc.z += w * v.z;
      acc.w += w * v.w;
    }
    if (clusters > 1) {
      *reinterpret_cast<float4*>(p.plan.partial_out + (first_row + r) * kDv + 4 * col4) = acc;
    } else {
      T* g = static_cast<T*>(p.out) + p.out_view.offset(request, r) + 4 * col4;  // a view
      *reinterpret_cast<uint2*>(g) = {pack2<T>(acc.x, acc.y), pack2<T>(acc.z, acc.w)};
    }
  }
}

#endif  // MLAKIT_SM90_WGMMA

}  // namespace mlakit::sm90
