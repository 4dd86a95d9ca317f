// Device helpers shared by the sm90 decode kernel's consumers (the wide tile in decode_kernel.cuh,
// the narrow tile in decode_narrow.cuh): the shared-memory regions, mbarrier waits, named
// barriers, TMA loads, the swizzled layout and the online-softmax max step.
#pragma once

#include <cuda/ptx>

#include "backends/sm90/config.h"
#include "backends/sm90/params.h"
#include "backends/sm90/wgmma.cuh"
#include "kernels/common/mbarrier.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/ptx.h"
#include "plan/page_mask.cuh"
#include "plan/work.cuh"

namespace mlakit::sm90 {

#ifdef MLAKIT_SM90_WGMMA

struct Smem {
  uint8_t* q;
  uint8_t* kv;
  float* exchange;  // narrow tile: kNarrowPassRows rows of fp32 (Layout)
  SmallStorage* small;
};

__device__ __forceinline__ void wait_parity(uint64_t* bar, uint32_t parity) {
  mbarrier_wait_parity(bar, parity);
}

__device__ __forceinline__ void arrive(uint64_t* bar) { (void)cuda::ptx::mbarrier_arrive(bar); }

// The named barrier of the two consumer warpgroups at the epilogue (256 threads; id 0 is
// __syncthreads).
inline constexpr int kEpilogueBarrier = 1;

__device__ __forceinline__ void consumer_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kConsumerThreads) : "memory");
}

// consumer_sync that also returns whether any consumer thread's pred was true (bar.red.or).
__device__ __forceinline__ bool consumer_sync_or(int id, bool pred) {
  uint32_t any;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n"
      " selp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(any)
      : "r"(static_cast<uint32_t>(pred)), "r"(id), "n"(kConsumerThreads)
      : "memory");
  return any != 0;
}

// The same for warpgroups that reach it from different instructions (the split sparse kernel's
// two consumer warpgroups run different code): bar.sync is barrier.sync.aligned, which requires
// every participating thread to execute the same instruction (synccheck reports the others as
// divergent); barrier.sync does not.
__device__ __forceinline__ void consumer_sync_unaligned(int id) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "n"(kConsumerThreads) : "memory");
}

__device__ __forceinline__ void tma_load_2d(uint8_t* dst, const CUtensorMap* map, int32_t col,
                                            int32_t row, uint64_t* bar) {
  const int32_t coords[2] = {col, row};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, dst, map,
                                  coords, bar);
}

__device__ __forceinline__ void tma_load_3d(uint8_t* dst, const CUtensorMap* map, int32_t col,
                                            int32_t row, int32_t plane, uint64_t* bar) {
  const int32_t coords[3] = {col, row, plane};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, dst, map,
                                  coords, bar);
}

// Byte offset of element (row, col) of a 64-column chunk in the 128-byte swizzle.
__device__ __forceinline__ uint32_t swizzled(int row, int col_bytes) {
  return row * 128 + ((((col_bytes >> 4) ^ row) & 7) << 4) + (col_bytes & 15);
}

// The tokens a query row of the request sees in a chunk: the chunk's, and with causal MTP fewer
// for its early query tokens (row r is query token r / h_q); with context parallelism the bound
// counted from the global length (DecodeParamsBase::causal_bounds).
__device__ __forceinline__ int32_t visible_limit(const DecodeParams& p, const plan::Chunk& c,
                                                 int32_t r) {
  const int32_t sq = min(r / p.h_q, p.s_q - 1);
  if (!p.causal) return min(c.token_end, c.seq_len);
  return min(c.token_end, p.causal_bounds != nullptr ? p.causal_bounds[c.request * p.s_q + sq]
                                                     : c.seq_len - (p.s_q - 1 - sq));
}

// The blocks of a chunk and a consumer warpgroup's share of them: blocks alternate between the
// warpgroups in the order of the CTA's block count n_block (block b of the chunk is warpgroup
// (n_block + b) % 2's); last: the warpgroup's last own block (-1: none), after which Q may go.
struct OwnBlocks {
  int32_t n, first, last;
};
__device__ __forceinline__ OwnBlocks own_blocks(const plan::Chunk& c, uint32_t n_block, int wg) {
  const int32_t n = (c.token_end - c.token_begin + kBlockN - 1) / kBlockN;
  const int32_t first = (n_block % 2) == static_cast<uint32_t>(wg) ? 0 : 1;
  return {.n = n, .first = first, .last = first < n ? first + (n - 1 - first) / 2 * 2 : -1};
}

// The row max after a block and the factor by which the sums so far shrink (both warpgroups
// compute it from the same two maxima, so their halves of O stay consistent).
struct MaxStep {
  float scaled;  // m_new * scale_log2 (0 while the row has seen nothing)
  float alpha;   // exp2((m_old - m_new) * scale_log2)
};

__device__ __forceinline__ MaxStep max_step(float& m, float m_new, float scale_log2) {
  const float scaled = m_new == -INFINITY ? 0.0f : m_new * scale_log2;
  const MaxStep step{scaled, ptx::ex2_approx_ftz_f32(m * scale_log2 - scaled)};
  m = m_new;
  return step;
}

// The wide tile's O *= alpha, only where a row's max moved (after the first blocks it rarely does).
__device__ __forceinline__ void rescale(float (&o)[128], const MaxStep (&step)[2]) {
  if (__any_sync(0xffffffffu, step[0].alpha != 1.0f || step[1].alpha != 1.0f)) {
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] *= step[(i / 2) % 2].alpha;
  }
}

// The wide tile's softmax of one block for the warpgroup that computed its S (sc, the m64n64
// accumulator, masked): the rows' new max (the four lanes of a row), published in row_max for
// the warpgroup that reads P from shared memory; step, the max step; P = exp2(S - max) as the A
// fragments of P V (pr) and over p_tile in the 128-byte swizzle; l, the running sums, updated.
template <typename T>
__device__ __forceinline__ void softmax_to_p(const float (&sc)[32], float (&m)[2], float (&l)[2],
                                             MaxStep (&step)[2], uint32_t (&pr)[16], float* row_max,
                                             uint32_t p_tile, float scale_log2, int row_a,
                                             int lane) {
  float mx[2] = {m[0], m[1]};
#pragma unroll
  for (int i = 0; i < 32; ++i) mx[(i / 2) % 2] = fmaxf(mx[(i / 2) % 2], sc[i]);
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 1));
    mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 2));
    if (lane % 4 == 0) row_max[row_a + 8 * e] = mx[e];
    step[e] = max_step(m[e], mx[e], scale_log2);
  }
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    const int e = (i / 2) % 2;
    const float p0 = ptx::ex2_approx_ftz_f32(sc[i] * scale_log2 - step[e].scaled);
    const float p1 = ptx::ex2_approx_ftz_f32(sc[i + 1] * scale_log2 - step[e].scaled);
    sum[e] += p0 + p1;
    const int row = row_a + 8 * e;
    const int col = 8 * (i / 4) + 2 * (lane % 4);
    pr[i / 2] = pack2<T>(p0, p1);
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(p_tile + swizzled(row, 2 * col)), "r"(pr[i / 2])
                 : "memory");
  }
#pragma unroll
  for (int e = 0; e < 2; ++e) l[e] = l[e] * step[e].alpha + sum[e];
}

#endif  // MLAKIT_SM90_WGMMA

}  // namespace mlakit::sm90
