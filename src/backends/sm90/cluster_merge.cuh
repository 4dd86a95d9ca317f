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

// Called by kThreads threads (the 256 consumer threads, or one warpgroup: threads k kThreads ..
// (k + 1) kThreads - 1) between two cluster barriers. kv: this CTA's KV stages (its result);
// request, m_tile and cluster (c of C): the cluster's.
template <typename T, int kTileRows, int kThreads = kConsumerThreads>
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
  const int tid =
      static_cast<int>(kThreads == kConsumerThreads ? threadIdx.x : threadIdx.x % kThreads);
  // Rows written: the request's (var_q: up to its q_len), to out or to a partial; the combine
  // reads no partial row past them. A tile wholly past them (var_q, several clusters a request:
  // ChunkIterator::skip_dead_tiles gave its CTAs no chunk) merges nothing. Every thread of the
  // cluster sees the same rows, and the cluster barriers around the merge are the caller's.
  const int32_t live = p.out_view.live_rows(request, p.rows);
  if (m_tile * kTileRows >= live) return;
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
    if (r < live) {
      if (clusters > 1) {
        p.plan.partial_lse[first_row + r] = lse;
      } else if (p.lse != nullptr) {
        p.lse[p.out_view.lse_index(request, r, p.rows)] = lse * p.lse_scale;  // natural or base 2
      }
    }
  }
  asm volatile("bar.sync %0, %1;\n" ::"n"(kMergeBarrier), "n"(kThreads) : "memory");
  // 2. Every float4 of the rows: the weighted sum of the S results. Each thread takes kUnroll
  // float4s at a time and requests all their S remote loads before it sums any (a load of
  // distributed shared memory waits hundreds of cycles; one at a time, 64 of them a thread took
  // ~3 us at S 2 with 128 threads).
  const uint32_t buf = ptx::smem_u32(kv);
  constexpr int kFloat4s = kDv / 4;
  constexpr int kUnroll = 2;
  const int total = (row_end - row_begin) * kFloat4s;
  for (int idx0 = tid; idx0 < total; idx0 += kUnroll * kThreads) {
    float4 v[kUnroll][kMaxClusterCtas];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int idx = min(idx0 + u * kThreads, total - 1);  // past the end: a float4 read twice
      const uint32_t at =
          buf + 4 * ((row_begin + idx / kFloat4s) * kMergeStride + 4 * (idx % kFloat4s));
#pragma unroll
      for (int k = 0; k < kMaxClusterCtas; ++k) {
        if (k < splits) v[u][k] = ptx::ld_shared_cluster_v4_f32(ptx::mapa_shared_cluster(at, k));
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int idx = idx0 + u * kThreads;
      const int row = row_begin + idx / kFloat4s;
      const int col4 = idx % kFloat4s;
      const int32_t r = m_tile * kTileRows + row;
      if (idx >= total || r >= live) continue;
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int k = 0; k < kMaxClusterCtas; ++k) {
        if (k < splits) {
          const float w = sm.merge_weight[row][k];
          acc.x += w * v[u][k].x;
          acc.y += w * v[u][k].y;
          acc.z += w * v[u][k].z;
          acc.w += w * v[u][k].w;
        }
      }
      if (clusters > 1) {
        *reinterpret_cast<float4*>(p.plan.partial_out + (first_row + r) * kDv + 4 * col4) = acc;
      } else {
        T* g = static_cast<T*>(p.out) + p.out_view.offset(request, r) + 4 * col4;  // a view
        *reinterpret_cast<uint2*>(g) = {pack2<T>(acc.x, acc.y), pack2<T>(acc.z, acc.w)};
      }
    }
  }
}

#endif  // MLAKIT_SM90_WGMMA

}  // namespace mlakit::sm90
