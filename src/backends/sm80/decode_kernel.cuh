// The sm80 MLA decode kernel: one CTA computes one query tile (kRows rows = (token, head) pairs
// of one request) against one chunk of the request's KV tokens at a time; the persistent schedule
// walks the chunks of its part, the one-shot schedule handles one chunk (src/plan/plan.h).
//
// Per chunk: the Q tile and the first stages - 1 KV tiles are copied (cp.async) into shared
// memory; then for each KV tile of 32 tokens:
//   wait for the tile, barrier, issue the copy of tile t + stages - 1    (loads.cuh)
//   S = Q K^T, dims split over warps; partials summed                    (qk_split_k.cuh)
//       through shared memory, barrier
//   mask, per-row tile max to shared memory, barrier                     (qk_softmax.cuh)
//   new max, P and alpha to shared memory, barrier
//   O = alpha * O + P V                                                  (pv.cuh)
// and at the end the epilogue writes the output or a partial (epilogue.cuh). Every warp takes
// both roles; the loads of the next tiles overlap the math of the current one. The 64-row tile
// on sm_90 instead splits the roles between score and output warps (decode_roles.cuh).
// Numbers (H200, bf16, page 64, L 4096, whole call with PDL, cold L2, 2026-11; mlakit bench and
// DISABLED_Breakdown in tests/gpu): h_q 16, b 64: 83.5-84.8 us, 3.6 TB/s (the decode kernel alone
// 77.7 us, 3.88 TB/s, 87% of the 4.47 TB/s read stream); h_q 128, b 64: 253 us (kRoles; the plain
// loop 334-338, latency-bound: ncu tensor pipe 33% active, 2 warps per scheduler, 36% of stalls on
// ldmatrix results); h_q 128, b 1: 22.0 us (persistent). docs/sm80-decode.md has the log.
#pragma once

#include "backends/sm80/config.h"
#include "backends/sm80/decode_roles.cuh"
#include "backends/sm80/epilogue.cuh"
#include "backends/sm80/launch.h"
#include "backends/sm80/loads.cuh"
#include "backends/sm80/loads_fp8.cuh"
#include "backends/sm80/params.h"
#include "backends/sm80/pv.cuh"
#include "backends/sm80/qk_softmax.cuh"
#include "backends/sm80/qk_split_k.cuh"
#include "core/cuda_check.h"
#include "kernels/common/fp8.cuh"
#include "kernels/common/pdl.h"
#include "plan/work.cuh"

namespace mlakit::sm80 {

// A copying thread's bits of bad tokens (KvLoader::bad_tokens) of the tile it copies into `stage`,
// ORed into the stage's word: the compute warps read it after the barrier that makes the tile
// visible, and compute_tile clears it once they have. An atomic only in a tile with a bad id.
template <typename T, typename Cfg>
__device__ __forceinline__ void publish_bad_tokens(SharedStorage<T, Cfg>& s, int stage,
                                                   uint32_t bits) {
  if (plan::kPageChecks && bits != 0) atomicOr(&s.bad_tokens[stage], bits);
}

// Issues the copies of the chunk's first stages - 1 KV tiles, one commit group each (the Q tile's
// copies, issued before, travel with tile 0). All block-table reads in flight at once, then the
// copies.
template <typename T, typename Cfg>
__device__ __forceinline__ void issue_first_tiles(SharedStorage<T, Cfg>& s,
                                                  const KvLoader<T, Cfg>& loader, uint32_t s_kv0,
                                                  const plan::Chunk& c, int stages, int n_tiles) {
  TileIds<Cfg> first_ids[kMaxStages - 1];
#pragma unroll
  for (int stage = 0; stage < kMaxStages - 1; ++stage) {
    if (stage < stages - 1) first_ids[stage] = loader.fetch_ids(c.token_begin + stage * kBlockN);
  }
#pragma unroll
  for (int stage = 0; stage < kMaxStages - 1; ++stage) {
    if (stage < stages - 1) {
      if (stage < n_tiles) {
        const TilePages<Cfg> pages = loader.check(first_ids[stage]);
        loader.load(s_kv0 + stage * kStageBytes, c.token_begin + stage * kBlockN, pages);
        publish_bad_tokens(s, stage, loader.bad_tokens(pages));
      }
      ptx::cp_async_commit_group();
    }
  }
}

// The math of tile t of a chunk, in stage `stage` at s_kv (visible to every warp): scores, mask,
// row maxima (a barrier), P and alpha (a barrier), O += P V. scale_log2: the scores' scale.
template <typename T, typename Cfg>
__device__ __forceinline__ void compute_tile(const DecodeParams& p, SharedStorage<T, Cfg>& s,
                                             const plan::Chunk& c, int row0, int t, uint32_t s_q,
                                             int stage, uint32_t s_kv, float scale_log2,
                                             QFragments<Cfg>& qf, ScoreState<Cfg>& st,
                                             OutAccumulators<Cfg>& o) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  float acc[Cfg::kSNTiles][4];
  const int tile_start = c.token_begin + t * kBlockN;
  if (t == 0) load_q_fragments<Cfg>(s_q, warp, lane, qf);
  compute_scores_split_k<T, Cfg>(qf, s_q, s_kv, s.score_parts, warp, lane, acc);
  mask_and_publish_max<T, Cfg>(acc, st, p, c, row0, tile_start, bad_tokens_of_stage(s, stage), s);
  __syncthreads();  // tile_max complete; every warp has read the stage's bad-token bits
  // Cleared for the stage's next tile, whose copying threads OR into it after the next barrier.
  if (plan::kPageChecks && threadIdx.x == 0) s.bad_tokens[stage] = 0;
  softmax_to_shared<T, Cfg>(acc, st, scale_log2, s);
  __syncthreads();  // P and alpha complete
  accumulate_pv<T, Cfg>(s, s_kv, warp, lane, o);
}

// q_loaded: the Q tile's copies were issued already (not committed: they travel with tile 0).
template <typename T, typename Cfg>
__device__ __forceinline__ void process_chunk(const DecodeParams& p, SharedStorage<T, Cfg>& s,
                                              int m_tile, const plan::Chunk& c, bool q_loaded) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int row0 = m_tile * Cfg::kRows;
  const uint32_t s_q = ptx::smem_u32(s.q);
  const uint32_t s_kv0 = ptx::smem_u32(&s) + sizeof(SharedStorage<T, Cfg>);
  const int stages = p.stages;

  // The previous chunk's epilogue ended with a barrier after its last reads of q and kv.
  if (!q_loaded) load_q<T, Cfg>(s_q, p, c.request, row0);
  KvLoader<T, Cfg> loader(p, c);
  const int n_tiles = (c.token_end - c.token_begin + kBlockN - 1) / kBlockN;
  issue_first_tiles<T, Cfg>(s, loader, s_kv0, c, stages, n_tiles);
  TileIds<Cfg> next_ids = loader.fetch_ids(c.token_begin + (stages - 1) * kBlockN);
  ScoreState<Cfg> st;
  QFragments<Cfg> qf;  // this warp's slice of Q, loaded with the first tile
  OutAccumulators<Cfg> o;
  zero_output<Cfg>(o);

  int read_stage = 0, write_stage = stages - 1;
#pragma unroll 1
  for (int t = 0; t < n_tiles; ++t) {
    ptx::cp_async_wait_group_dynamic(stages - 2);
    __syncthreads();  // tile t is visible; every warp is done with tile t - 1 and its stage
    const int next = t + stages - 1;
    if (next < n_tiles) {
      // The ids read a tile ago are checked here, where the copy uses them (KvLoader). The bits
      // are published after the next block-table read is issued: the publish's branch between
      // them had held that read behind the copies (SASS, docs/sm80-decode.md item 28).
      const TilePages<Cfg> pages = loader.check(next_ids);
      const uint32_t bad = loader.bad_tokens(pages);
      loader.load(s_kv0 + write_stage * kStageBytes, c.token_begin + next * kBlockN, pages);
      next_ids = loader.fetch_ids(c.token_begin + (next + 1) * kBlockN);
      publish_bad_tokens(s, write_stage, bad);
    }
    ptx::cp_async_commit_group();
    write_stage = write_stage + 1 == stages ? 0 : write_stage + 1;

    compute_tile<T, Cfg>(p, s, c, row0, t, s_q, read_stage, s_kv0 + read_stage * kStageBytes,
                         p.scale_log2, qf, st, o);
    read_stage = read_stage + 1 == stages ? 0 : read_stage + 1;
  }
  ptx::cp_async_wait_group<0>();  // only empty groups remain
  write_epilogue<T, Cfg>(p, s, c, row0, st, o, warp, lane, p.scale_log2, 1.0f);
}

// process_chunk for an fp8 cache (loads_fp8.cuh): the same tile loop with the KV tiles widened to
// T on their way into shared memory, a tile held in registers between its fetch and its store;
// the dequantization scales go to the softmax (q and k) and the epilogue (v). q is T (copied as
// in process_chunk) or e4m3 (widened). kCache V3.2 or V4 (ScaledKvLoader): each value widened
// times its group's scale and k_scale, so the factors are the 16-bit cache's.
template <typename T, typename Cfg, Fp8Cache kCache = Fp8Cache::kOneScale>
__device__ __forceinline__ void process_chunk_fp8(const DecodeParams& p, SharedStorage<T, Cfg>& s,
                                                  int m_tile, const plan::Chunk& c,
                                                  const fp8::Scales& scales) {
  static_assert(!Cfg::kRoles, "the fp8 cache runs the plain loop");
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int row0 = m_tile * Cfg::kRows;
  const uint32_t s_q = ptx::smem_u32(s.q);
  const uint32_t s_kv0 = ptx::smem_u32(&s) + sizeof(SharedStorage<T, Cfg>);
  const int stages = p.stages;
  constexpr bool kScaled = kCache != Fp8Cache::kOneScale;
  const float scale_log2 = kScaled ? p.scale_log2 : p.scale_log2 * scales.qk;
  const float v_scale = kScaled ? 1.0f : scales.v;

  // The previous chunk's epilogue ended with a barrier after its last reads of q and kv.
  if (p.q_fp8) {
    load_q_fp8<T, Cfg>(s_q, p, c.request, row0);
  } else {
    load_q<T, Cfg>(s_q, p, c.request, row0);
  }
  ptx::cp_async_commit_group();
  constexpr bool kV4 = kCache == Fp8Cache::kV4;
  using Loader = std::conditional_t<kScaled, ScaledKvLoader<T, Cfg, kV4>, Fp8KvLoader<T, Cfg>>;
  const Loader loader = [&] {
    if constexpr (kScaled) {
      return Loader(p, c, scales.v);
    } else {
      return Loader(p, c);
    }
  }();
  const int n_tiles = (c.token_end - c.token_begin + kBlockN - 1) / kBlockN;
  std::conditional_t<kScaled, ScaledTileRegs<Cfg, kV4>, Fp8TileRegs<Cfg>> regs;
  for (int t = 0; t < stages - 1 && t < n_tiles; ++t) {
    loader.fetch(c.token_begin + t * kBlockN, regs);
    loader.store(s_kv0 + t * kStageBytes, regs);
    publish_bad_tokens(s, t, regs.bad);
  }
  if (stages - 1 < n_tiles) loader.fetch(c.token_begin + (stages - 1) * kBlockN, regs);
  ScoreState<Cfg> st;
  QFragments<Cfg> qf;
  OutAccumulators<Cfg> o;
  zero_output<Cfg>(o);

  int read_stage = 0, write_stage = stages - 1;
#pragma unroll 1
  for (int t = 0; t < n_tiles; ++t) {
    ptx::cp_async_wait_group<0>();  // q (16-bit)
    __syncthreads();  // tile t is visible; every warp is done with tile t - 1 and its stage
    const int next = t + stages - 1;
    if (next < n_tiles) {
      loader.store(s_kv0 + write_stage * kStageBytes, regs);
      publish_bad_tokens(s, write_stage, regs.bad);
      if (next + 1 < n_tiles) loader.fetch(c.token_begin + (next + 1) * kBlockN, regs);
    }
    write_stage = write_stage + 1 == stages ? 0 : write_stage + 1;

    compute_tile<T, Cfg>(p, s, c, row0, t, s_q, read_stage, s_kv0 + read_stage * kStageBytes,
                         scale_log2, qf, st, o);
    read_stage = read_stage + 1 == stages ? 0 : read_stage + 1;
  }
  ptx::cp_async_wait_group<0>();
  write_epilogue<T, Cfg>(p, s, c, row0, st, o, warp, lane, scale_log2, v_scale);
}

// kFp8: the cache is e4m3 (process_chunk_fp8), T the type the math runs in; kCache: which e4m3
// cache (the V3.2 and V4 layouts sparse only).
template <typename T, typename Cfg, bool kFp8, Fp8Cache kCache = Fp8Cache::kOneScale>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    decode_kernel(const __grid_constant__ DecodeParams p) {
  static_assert(kFp8 || kCache == Fp8Cache::kOneScale);
  extern __shared__ __align__(128) uint8_t smem_raw[];
  auto& s = *reinterpret_cast<SharedStorage<T, Cfg>*>(smem_raw);
  // Query tiles vary fastest over the grid: the CTAs of one chunk (or part) are scheduled
  // together, and the ones with work before one-shot CTAs past their request's chunks. With the
  // query tile on blockIdx.y, the idle one-shot CTAs of tile 0 went to the SMs before the
  // working ones of tile 1 (batch 8, h_q 128: about 1 us more in the decode kernel).
  const int32_t m_tiles = (p.rows + Cfg::kRows - 1) / Cfg::kRows;
  const int m_tile = static_cast<int>(blockIdx.x % m_tiles);
  const int32_t cta = static_cast<int32_t>(blockIdx.x / m_tiles);
  // One-shot CTAs of split 0 (they always have work if their request has any) load their Q tile
  // while the plan kernel runs: the caller's inputs are final, since this grid launched only
  // once the plan kernel had passed its own griddepcontrol.wait, and the plan writes no Q.
  const bool q_loaded = !kFp8 && p.schedule == plan::Schedule::kOneShot && cta < p.batch;
  if constexpr (Cfg::kRoles) {
    // Score warps copy Q; the barrier after the stages' mbarrier init comes below or with the
    // persistent plan.
    if (q_loaded && threadIdx.x < 32 * Cfg::kScoreWarps) {
      load_q<T, Cfg, 32 * Cfg::kScoreWarps>(ptx::smem_u32(s.q), p, cta, m_tile * Cfg::kRows);
    }
    roles::init_barriers<T, Cfg>(s);
  } else {
    // The copying threads OR into the stages' bad-token words (publish_bad_tokens): clear before
    // the barrier below or with the persistent plan.
    if (plan::kPageChecks && threadIdx.x < kMaxStages) s.bad_tokens[threadIdx.x] = 0;
    if (q_loaded) load_q<T, Cfg>(ptx::smem_u32(s.q), p, cta, m_tile * Cfg::kRows);
  }
  // Tactic 4 (p.speculate): a persistent CTA that plans itself does so now, on the lengths as
  // they are, and confirms the part after the wait (part_plan.cuh). Not in the kRoles loop: there
  // it made h_q 128, b 1, L 4096 slower (H100: 21.8 us against 19.7; not investigated). Nor in
  // the grid's first CTA, which plans after the wait anyway (it writes every request's metadata)
  // and would only start later. Prefetching the part's first 64 tokens into L2 here as well made
  // the H200 slower (h_q 16, L 4096: b 8 20.2 -> 22.0 us, b 64 81.5 -> 83.3) and the H100 no
  // faster (docs/sm80-decode.md item 27).
  const bool speculate = !Cfg::kRoles && p.speculate && blockIdx.x != 0 && plan::can_speculate(p);
  plan::SpeculativePart spec;
  if (speculate && threadIdx.x < 32) spec = plan::speculate_part(p, cta);
  // Everything else reads seq_lens or the plan: wait for the previous kernel (the plan kernel,
  // or, when this grid plans itself, the caller's kernels and the previous call's combine, which
  // reads the RequestMeta written here). The combine kernel may start its launch now; it waits
  // for this grid before reading anything.
  pdl::griddepcontrol_wait();
  pdl::griddepcontrol_launch_dependents();
  if (p.schedule == plan::Schedule::kPersistent) {
    // One warp plans this CTA's part; CTA 0 also writes every request's metadata for the
    // combine kernel.
    if (threadIdx.x < 32) {
      const plan::PartPlan pp =
          speculate ? plan::confirm_part(p, cta, spec) : plan::part_for_cta(p, cta);
      if (threadIdx.x == 0) s.part = pp;
    }
    __syncthreads();
  } else if constexpr (Cfg::kRoles || plan::kPageChecks) {
    __syncthreads();  // the mbarriers (kRoles) or the bad-token words are initialized
  }
  if constexpr (Cfg::kRoles) {
    roles::run<T, Cfg>(p, s, m_tile, cta, q_loaded);
  } else {
    plan::ChunkIterator chunks(p.plan, p.schedule, cta, p.batch, &s.part, p.seq_lens, p.max_len);
    chunks.skip_dead_tiles(p.out_view, m_tile * Cfg::kRows);  // var_q
    plan::Chunk c;
    bool first = true;
    [[maybe_unused]] fp8::Scales scales;
    if constexpr (kFp8) scales = fp8::read_scales(p);
    while (chunks.next(&c)) {
      if constexpr (kFp8) {
        process_chunk_fp8<T, Cfg, kCache>(p, s, m_tile, c, scales);
      } else {
        process_chunk<T, Cfg>(p, s, m_tile, c, q_loaded && first);
      }
      first = false;
    }
    if (q_loaded && first) {
      // The request has no chunk: the Q copies must land before the CTA exits.
      ptx::cp_async_commit_group();
      ptx::cp_async_wait_group<0>();
    }
  }
}

template <typename T, typename Cfg, bool kFp8, Fp8Cache kCache = Fp8Cache::kOneScale>
Status prepare_decode(int stages, int* ctas_per_sm) {
  const size_t smem = SharedStorage<T, Cfg>::smem_bytes(stages);
  MLAKIT_CUDA_RETURN(cudaFuncSetAttribute(decode_kernel<T, Cfg, kFp8, kCache>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  MLAKIT_CUDA_RETURN(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      ctas_per_sm, decode_kernel<T, Cfg, kFp8, kCache>, Cfg::kThreads, smem));
  return Status::Ok();
}

template <typename T, typename Cfg, bool kFp8, Fp8Cache kCache = Fp8Cache::kOneScale>
Status launch_decode(const DecodeParams& p, dim3 grid, cudaStream_t stream, bool pdl) {
  MLAKIT_CUDA_RETURN(pdl::launch(decode_kernel<T, Cfg, kFp8, kCache>, grid, dim3(Cfg::kThreads),
                                 SharedStorage<T, Cfg>::smem_bytes(p.stages), stream, pdl, p));
  return Status::Ok();
}

// The table entry of one instantiation (one per decode_<dtype>_<tile>.cu,
// decode_e4m3_<dtype>_<tile>.cu, decode_v32_<dtype>_<tile>.cu and decode_v4_<dtype>_<tile>.cu).
template <typename T, typename Cfg, bool kFp8 = false, Fp8Cache kCache = Fp8Cache::kOneScale>
constexpr DecodeKernel decode_kernel_entry() {
  return {.rows = Cfg::kRows,
          .smem_fixed_bytes = sizeof(SharedStorage<T, Cfg>),
          .prepare = prepare_decode<T, Cfg, kFp8, kCache>,
          .launch = launch_decode<T, Cfg, kFp8, kCache>};
}

}  // namespace mlakit::sm80
