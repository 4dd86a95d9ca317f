// The sm80 decode kernel's producer-consumer tile loop (config.h, Loop::kRoles): score warps and
// output warps in one CTA, each on its own instruction stream.
//
// Score warp w owns query rows 16w .. 16w + 15 of the tile whole: per KV tile it computes their
// scores against all 32 tokens and all 576 dims (mma.sync, Q and K from shared memory, fragments
// loaded kScoreAhead k-steps ahead), masks, takes the row max inside the warp (lazily:
// qk_softmax.cuh), and writes P and alpha into one of two buffers. Output warp u owns the 64 x 64
// block of columns 64u of O: per tile it rescales O by alpha (rarely needed, thanks to the lazy
// max), adds P V, and copies KV tiles into the stages that finished. The loop synchronizes through
// mbarriers and one barrier of all threads per tile:
//   kv_full[stage] (mbarrier, one arrival per output thread through cp.async.mbarrier.arrive):
//       the stage's copies landed; score warps wait for it before the scores, output warps
//       before P V.
//   the barrier of tile t (barrier 0, cta_sync): the score warps have written P and alpha of tile t
//   into
//       buffers t & 1, the output warps are done with P V of tile t - 1. After it the output
//       warps refill the stage of tile t - 1 (every warp is past it) and run P V of tile t while
//       the score warps compute tile t + 1 into the other buffers.
// Letting the score warps run two tiles ahead (arrive on the producer side, a second barrier for
// "buffer free") was not faster (docs/sm80-decode.md, item 21).
// While the output warps work on tile t the score warps work on tile t + 1: each SM sub-partition
// runs one score warp and two output warps, whose mma streams fill each other's waits (the plain
// loop holds O and the score fragments in the same 255 registers, and its score k-steps run one
// ldmatrix-to-mma latency each; docs/sm80-decode.md, item 21).
#pragma once

#include <cuda/ptx>

#include "backends/sm80/config.h"
#include "backends/sm80/epilogue.cuh"
#include "backends/sm80/loads.cuh"
#include "backends/sm80/params.h"
#include "backends/sm80/pv.cuh"
#include "backends/sm80/qk_softmax.cuh"
#include "backends/sm80/qk_split_k.cuh"
#include "kernels/common/ptx.h"
#include "plan/work.cuh"

namespace mlakit::sm80 {
namespace roles {

// K-steps of fragments a score warp loads ahead of its mma (qk_split_k.cuh, run_ahead).
inline constexpr int kScoreAhead = 3;

// Barrier 0 of all threads of the CTA, which the two roles reach at different instructions: the
// non-aligned form (bar.sync is barrier.sync.aligned, which requires every thread to execute the
// same instruction; compute-sanitizer's synccheck reports it from divergent code). It costs: with
// bar.sync, h_q 128 batch 64 took 266-270 us instead of 282 (H200), as the compiler no longer
// knows the warps converged after it. The only kind of barrier here: with a named barrier of the
// score warps alone (for Q), racecheck reported every handoff after it as a race
// (docs/sm80-decode.md, item 21).
__device__ __forceinline__ void cta_sync() { asm volatile("barrier.sync 0;\n" ::: "memory"); }

// Waits until the phase of `bar` with parity `parity` has completed (sm_90: try_wait, which
// suspends the thread in hardware for a while; sm_80: polling test_wait).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#if __CUDA_ARCH__ >= 900
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, parity)) {
  }
#else
  while (!cuda::ptx::mbarrier_test_wait_parity(bar, parity)) {
  }
#endif
}

// cp.async.mbarrier.arrive.noinc (sm_80): one arrival on `bar` once every cp.async this thread
// issued so far has landed (counted in the barrier's expected arrivals).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(ptx::smem_u32(bar))
               : "memory");
}

// The KV tile with CTA-wide sequence number g (tiles of all the CTA's chunks, in order) lives in
// stage g % stages, and its copies complete phase g / stages of that stage's mbarrier. Made once
// per chunk and advanced tile by tile: the division by the runtime stage count, per tile, sat on
// the score warps' critical path (h_q 128, batch 64, L 4096: 258-260 -> 253 us, H200).
struct TileSlot {
  int stage;
  uint32_t parity;
  __device__ __forceinline__ TileSlot(uint32_t g, int stages)
      : stage(static_cast<int>(g % static_cast<uint32_t>(stages))),
        parity((g / static_cast<uint32_t>(stages)) & 1u) {}
  __device__ __forceinline__ void advance(int stages) {
    if (++stage == stages) {
      stage = 0;
      parity ^= 1u;
    }
  }
};

// Once per CTA, before any chunk: the stages' mbarriers (a barrier of all threads follows).
template <typename T, typename Cfg>
__device__ __forceinline__ void init_barriers(SharedStorage<T, Cfg>& s) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int stage = 0; stage < kMaxStages; ++stage) {
      cuda::ptx::mbarrier_init(&s.kv_full[stage], Cfg::kCopyThreads);
    }
  }
}

template <typename T, typename Cfg>
__device__ __forceinline__ void score_warp_chunk(const DecodeParams& p, SharedStorage<T, Cfg>& s,
                                                 int row0, const plan::Chunk& c, bool q_loaded,
                                                 uint32_t g0, int n_tiles) {
  constexpr int kScoreThreads = 32 * Cfg::kScoreWarps;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const uint32_t s_q = ptx::smem_u32(s.q);
  const uint32_t s_kv0 = ptx::smem_u32(&s) + sizeof(SharedStorage<T, Cfg>);
  if (!q_loaded) {
    load_q<T, Cfg, kScoreThreads>(s_q, p, c.request, row0, static_cast<int>(threadIdx.x));
  }
  ptx::cp_async_commit_group();
  ptx::cp_async_wait_group<0>();
  cta_sync();  // Q is visible to every score warp
  QFragments<Cfg> qf;
  load_q_fragments<Cfg>(s_q, warp, lane, qf);

  // Warp 0 reads the page ids of the tiles the output warps copy in the loop (tile stages - 1 + t
  // at P full of tile t), a tile ahead, and publishes them with P: the output warps' registers
  // are all taken by O, and a block-table read in their loop stalled them.
  const int stages = p.stages;
  const bool pages_lane = warp == 0;
  const int32_t* g_pages = p.block_table + c.request * p.block_table_stride;
  const auto page_of = [&](int tile) {
    const int pos = c.token_begin + tile * kBlockN + lane;
    return tile < n_tiles && pos < c.token_end ? g_pages[pos >> p.page_shift] : 0;
  };
  int32_t page = pages_lane ? page_of(stages) : 0;
  ScoreState<Cfg> st;
  const int mask_from = visible_bound(p, c, row0);
  TileSlot slot(g0, stages);
#pragma unroll 1
  for (int t = 0; t < n_tiles; ++t, slot.advance(stages)) {
    mbarrier_wait(&s.kv_full[slot.stage], slot.parity);
    SplitKScores<T, Cfg> scores(s_q, s_kv0 + slot.stage * kStageBytes, warp, lane);
    scores.template run_ahead<kScoreAhead>(qf);
    const int b = t & 1;
    // Buffers b were last read by the output warps for tile t - 2, before they joined the
    // barrier of tile t - 1.
    if (pages_lane && t >= 1) {
      s.tile_pages[(t - 1) & 1][lane] = page;
      page = page_of(stages + t);
    }
    const int tile_start = c.token_begin + t * kBlockN;
    softmax_full_rows<T, Cfg>(scores.scores(), st, p, c, row0, tile_start, mask_from, s.p_buf[b],
                              s.alpha_buf[b]);
    cta_sync();
  }
  write_row_stats<T, Cfg>(p, s, c, row0, st);
  cta_sync();
}

template <typename T, typename Cfg>
__device__ __forceinline__ void output_warp_chunk(const DecodeParams& p, SharedStorage<T, Cfg>& s,
                                                  int row0, const plan::Chunk& c, uint32_t g0,
                                                  int n_tiles) {
  const int tid = static_cast<int>(threadIdx.x) - 32 * Cfg::kScoreWarps;
  const int warp = tid / 32, lane = tid % 32;
  const uint32_t s_kv0 = ptx::smem_u32(&s) + sizeof(SharedStorage<T, Cfg>);
  const int stages = p.stages;
  const KvLoader<T, Cfg> loader(p, c, tid);
  // The first stages tiles, one mbarrier phase each. Their stages are free: the previous chunk
  // ended with a barrier of all threads after its last reads.
#pragma unroll 1
  for (int i = 0; i < stages && i < n_tiles; ++i) {
    const TileSlot slot(g0 + i, stages);
    loader.load(s_kv0 + slot.stage * kStageBytes, c.token_begin + i * kBlockN,
                loader.fetch_pages(c.token_begin + i * kBlockN));
    ptx::cp_async_commit_group();
    cp_async_mbarrier_arrive_noinc(&s.kv_full[slot.stage]);
  }
  OutAccumulators<Cfg> o;
  zero_output<Cfg>(o);
  cta_sync();  // the score warps' Q copies have landed
  // Tiles t and t - 1.
  TileSlot slot(g0, stages), free_slot = slot;
#pragma unroll 1
  for (int t = 0; t < n_tiles; ++t) {
    const int b = t & 1;
    cta_sync();
    rescale_o<Cfg>(s.alpha_buf[b], warp, lane, o);
    // Every output thread arrived here after its P V of tile t - 1, and every score warp read
    // that tile before the barrier of tile t - 1: its stage takes tile t - 1 + stages.
    const int next = t - 1 + stages;
    if (t >= 1 && next < n_tiles) {
      const KvLoader<T, Cfg> tile_loader(p, c, tid);
      TilePages<Cfg> pages;
#pragma unroll
      for (int pass = 0; pass < Cfg::kLoadPasses; ++pass) {
        pages.page[pass] = s.tile_pages[(t - 1) & 1][tile_loader.token(pass)];
      }
      tile_loader.load(s_kv0 + free_slot.stage * kStageBytes, c.token_begin + next * kBlockN,
                       pages);
      ptx::cp_async_commit_group();
      cp_async_mbarrier_arrive_noinc(&s.kv_full[free_slot.stage]);
    }
    // Done long ago (the score warps waited for it); makes the other threads' copies visible
    // to this one.
    mbarrier_wait(&s.kv_full[slot.stage], slot.parity);
    add_pv<T, Cfg>(ptx::smem_u32(s.p_buf[b]), s_kv0 + slot.stage * kStageBytes, warp, lane, o);
    free_slot = slot;
    slot.advance(stages);
  }
  cta_sync();  // row_scale is complete
  write_output<T, Cfg>(p, s, c, row0, o, warp, lane);
}

// One chunk; g_tile: the CTA's tile sequence number of the chunk's first tile (advanced past it).
// q_loaded: the score threads issued the Q tile's copies already (not committed).
template <typename T, typename Cfg>
__device__ __forceinline__ void process_chunk(const DecodeParams& p, SharedStorage<T, Cfg>& s,
                                              int m_tile, const plan::Chunk& c, bool q_loaded,
                                              uint32_t& g_tile) {
  const int row0 = m_tile * Cfg::kRows;
  const int n_tiles = (c.token_end - c.token_begin + kBlockN - 1) / kBlockN;
  if (static_cast<int>(threadIdx.x) < 32 * Cfg::kScoreWarps) {
    score_warp_chunk<T, Cfg>(p, s, row0, c, q_loaded, g_tile, n_tiles);
  } else {
    output_warp_chunk<T, Cfg>(p, s, row0, c, g_tile, n_tiles);
  }
  g_tile += static_cast<uint32_t>(n_tiles);
  // Every read of Q, P, row_scale and the KV stages is done before the next chunk writes them.
  __syncthreads();
}

}  // namespace roles
}  // namespace mlakit::sm80
