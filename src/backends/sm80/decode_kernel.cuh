// The sm80 MLA decode kernel: one CTA computes one query tile (kRows rows = (token, head) pairs
// of one request) against one chunk of the request's KV tokens at a time; the persistent schedule
// walks the chunks of its part, the one-shot schedule handles one chunk (src/plan/plan.h).
//
// Per chunk: the Q tile and the first stages - 1 KV tiles are copied (cp.async) into shared
// memory; then for each KV tile of 32 tokens:
//   wait for the tile, barrier, issue the copy of tile t + stages - 1    (loads.cuh)
//   S = Q K^T, mask, per-row tile max to shared memory, barrier          (qk_softmax.cuh,
//       or with Q in registers and the dims split over warps             qk_split_k.cuh)
//   new max, P and alpha to shared memory, barrier
//   O = alpha * O + P V                                                  (pv.cuh)
// and at the end the epilogue writes the output or a partial (epilogue.cuh). Every warp takes
// both roles; the loads of the next tiles overlap the math of the current one.
// Numbers (H100 SXM, bf16, page 64, whole call, cold L2, 2026-11; DISABLED_Timing in tests/gpu):
// h_q 16, b 64, L 4096: 128 us, 2.35 TB/s (the decode kernel alone at 75% of DRAM peak);
// h_q 32: 134 us; h_q 64: 227 us; h_q 128: 376 us (one-shot), 194 TFLOP/s with mma.sync.
#pragma once

#include "backends/sm80/config.h"
#include "backends/sm80/epilogue.cuh"
#include "backends/sm80/launch.h"
#include "backends/sm80/loads.cuh"
#include "backends/sm80/params.h"
#include "backends/sm80/pv.cuh"
#include "backends/sm80/qk_softmax.cuh"
#include "backends/sm80/qk_split_k.cuh"
#include "core/cuda_check.h"
#include "kernels/common/pdl.h"
#include "plan/work.cuh"

namespace mlakit::sm80 {

template <typename T, typename Cfg>
__device__ __forceinline__ void process_chunk(const DecodeParams& p, SharedStorage<T, Cfg>& s,
                                              int m_tile, const plan::Chunk& c) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int row0 = m_tile * Cfg::kRows;
  const uint32_t s_q = ptx::smem_u32(s.q);
  const uint32_t s_kv0 = ptx::smem_u32(&s) + sizeof(SharedStorage<T, Cfg>);
  const int stages = p.stages;

  // The previous chunk's epilogue ended with a barrier after its last reads of q and kv.
  load_q<T, Cfg>(s_q, static_cast<const T*>(p.q) + (int64_t{c.request} * p.rows + row0) * kDqk,
                 min(Cfg::kRows, p.rows - row0));
  KvLoader<T, Cfg> loader(p, c);
  const int n_tiles = (c.token_end - c.token_begin + kBlockN - 1) / kBlockN;
  // Prologue: tiles 0 .. stages - 2, one commit group each (the Q tile travels with tile 0). All
  // block-table reads in flight at once, then the copies.
  TilePages<Cfg> first_pages[kMaxStages - 1];
#pragma unroll
  for (int stage = 0; stage < kMaxStages - 1; ++stage) {
    if (stage < stages - 1)
      first_pages[stage] = loader.fetch_pages(c.token_begin + stage * kBlockN);
  }
#pragma unroll
  for (int stage = 0; stage < kMaxStages - 1; ++stage) {
    if (stage < stages - 1) {
      if (stage < n_tiles) {
        loader.load(s_kv0 + stage * kStageBytes, c.token_begin + stage * kBlockN,
                    first_pages[stage]);
      }
      ptx::cp_async_commit_group();
    }
  }
  TilePages<Cfg> next_pages = loader.fetch_pages(c.token_begin + (stages - 1) * kBlockN);

  ScoreState<Cfg> st;
  QFragments<Cfg> qf;  // split-K configs: this warp's slice of Q, loaded with the first tile
  OutAccumulators<Cfg> o;
#pragma unroll
  for (int mt = 0; mt < Cfg::kOMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < Cfg::kONTiles; ++nt) {
#pragma unroll
      for (int k = 0; k < 4; ++k) o[mt][nt][k] = 0.0f;
    }
  }

  int read_stage = 0, write_stage = stages - 1;
#pragma unroll 1
  for (int t = 0; t < n_tiles; ++t) {
    ptx::cp_async_wait_group_dynamic(stages - 2);
    __syncthreads();  // tile t is visible; every warp is done with tile t - 1 and its stage
    const int next = t + stages - 1;
    if (next < n_tiles) {
      loader.load(s_kv0 + write_stage * kStageBytes, c.token_begin + next * kBlockN, next_pages);
      next_pages = loader.fetch_pages(c.token_begin + (next + 1) * kBlockN);
    }
    ptx::cp_async_commit_group();
    write_stage = write_stage + 1 == stages ? 0 : write_stage + 1;

    const uint32_t s_kv = s_kv0 + read_stage * kStageBytes;
    read_stage = read_stage + 1 == stages ? 0 : read_stage + 1;
    float acc[Cfg::kSNTiles][4];
    if constexpr (Cfg::kSplitK) {
      if (t == 0) load_q_fragments<Cfg>(s_q, warp, lane, qf);
      compute_scores_split_k<T, Cfg>(qf, s_kv, s.score_parts, warp, lane, acc);
    } else {
      compute_scores<T, Cfg>(s_q, s_kv, st, lane, acc);
    }
    mask_and_publish_max<T, Cfg>(acc, st, p, c, row0, c.token_begin + t * kBlockN, s);
    __syncthreads();  // tile_max complete
    softmax_to_shared<T, Cfg>(acc, st, p.scale_log2, s);
    __syncthreads();  // P and alpha complete
    accumulate_pv<T, Cfg>(s, s_kv, warp, lane, o);
  }
  ptx::cp_async_wait_group<0>();  // only empty groups remain
  write_epilogue<T, Cfg>(p, s, c, row0, st, o, warp, lane);
}

template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    decode_kernel(const __grid_constant__ DecodeParams p) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<T, Cfg>*>(smem_raw);
  // Everything below reads the plan, the caller's inputs or the workspace: wait for the plan
  // kernel (and, through it, everything before). The combine kernel may start its launch now; it
  // waits for this grid before reading anything.
  pdl::griddepcontrol_wait();
  pdl::griddepcontrol_launch_dependents();
  const int m_tile = static_cast<int>(blockIdx.y);
  if (p.schedule == plan::Schedule::kPersistent) {
    plan::for_each_chunk_of_part(
        p.plan, static_cast<int32_t>(blockIdx.x), p.batch,
        [&](const plan::Chunk& c) { process_chunk<T, Cfg>(p, s, m_tile, c); });
  } else {
    plan::Chunk c;
    const int32_t split = static_cast<int32_t>(blockIdx.x) % p.plan.max_splits;
    const int32_t request = static_cast<int32_t>(blockIdx.x) / p.plan.max_splits;
    if (plan::one_shot_chunk(p.plan, split, request, &c)) process_chunk<T, Cfg>(p, s, m_tile, c);
  }
}

template <typename T, typename Cfg>
Status prepare_decode(int stages, int* ctas_per_sm) {
  const size_t smem = SharedStorage<T, Cfg>::smem_bytes(stages);
  MLAKIT_CUDA_RETURN(cudaFuncSetAttribute(decode_kernel<T, Cfg>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  MLAKIT_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      ctas_per_sm, decode_kernel<T, Cfg>, Cfg::kThreads, smem));
  return Status::Ok();
}

template <typename T, typename Cfg>
Status launch_decode(const DecodeParams& p, dim3 grid, cudaStream_t stream, bool pdl) {
  MLAKIT_CUDA_RETURN(pdl::launch(decode_kernel<T, Cfg>, grid, dim3(Cfg::kThreads),
                                 SharedStorage<T, Cfg>::smem_bytes(p.stages), stream, pdl, p));
  return Status::Ok();
}

// The table entry of one instantiation (one per decode_<dtype>_<tile>.cu).
template <typename T, typename Cfg>
constexpr DecodeKernel decode_kernel_entry() {
  return {.rows = Cfg::kRows,
          .smem_fixed_bytes = sizeof(SharedStorage<T, Cfg>),
          .prepare = prepare_decode<T, Cfg>,
          .launch = launch_decode<T, Cfg>};
}

}  // namespace mlakit::sm80
