// The sm80 decode kernel's producer-consumer tile loop (config.h, Loop::kRoles): score warps and
// output warps in one CTA, each on its own instruction stream and register budget.
//
// Score warps come in pairs: warp w = 2 pair + kg computes the partial scores of the pair's 32
// query rows over half kg of the 576 dims against all 32 tokens of a KV tile (qk_pairs.cuh: each
// K fragment feeds two row blocks, so K is read twice per tile rather than four times), swaps
// halves with the other warp across the tile's barrier (send_partials, receive_partials) so that it
// holds the whole scores of rows 16 w .. 16 w + 15, and turns them into P and alpha
// (qk_softmax.cuh; the row max lazily). That softmax runs inside the score loop of the next tile,
// where ptxas schedules its exp2 and shuffles among the mma. Output warp u owns the 64 x 64 block
// of columns 64u of O: per tile it rescales O by alpha (rarely needed, thanks to the lazy max),
// adds P V, and copies KV tiles into the stages that finished. setmaxnreg gives the score warps
// kScoreRegs registers and the output warps (O is 128 of theirs) kOutputRegs. The loop synchronizes
// through mbarriers and one barrier of all threads per tile:
//   kv_full[stage] (mbarrier, one arrival per output thread through cp.async.mbarrier.arrive):
//       the stage's copies landed; score warps test it for the next tile before the barrier and
//       wait only if the copies had not landed, output warps wait before P V.
//   the barrier of tile t (barrier 0, cta_sync): the score warps have written P and alpha of tile
//       t into buffers t & 1 (in their loop over tile t + 1) and their partials of tile t + 1 into
//       the swap buffers, the output warps are done with P V of tile t - 1. After it the output
//       warps refill the stage of tile t - 1 (every warp is past it) and run P V of tile t while
//       the score warps compute tile t + 2 and the softmax of tile t + 1. The refill reaches the
//       score warps a tile later than the barrier, so the loop takes 4 KV stages to keep a tile of
//       slack (with 3, a variant took 292 us against 259 with 4).
// Measured (H200, h_q 128, batch 64, L 4096, docs/sm80-decode.md items 23 and 24): 16 whole rows
// per score warp, softmax after the score loop, 168 registers for all: 253-258 us; pairs 247-248;
// with setmaxnreg 240; the softmax inside the next loop 226-229; P V unrolled 224-227; the swap
// across the barrier, the early test of the next stage, softmax step 4 and 152 registers 213-215.
#pragma once

#include <cuda/ptx>

#include "backends/sm80/config.h"
#include "backends/sm80/epilogue.cuh"
#include "backends/sm80/loads.cuh"
#include "backends/sm80/params.h"
#include "backends/sm80/pv.cuh"
#include "backends/sm80/qk_pairs.cuh"
#include "backends/sm80/qk_softmax.cuh"
#include "backends/sm80/qk_split_k.cuh"
#include "kernels/common/mbarrier.cuh"
#include "kernels/common/ptx.h"
#include "plan/work.cuh"

namespace mlakit::sm80 {
namespace roles {

// K-steps of fragments a score warp loads ahead of its mma (qk_pairs.cuh); 2 and 4 measured the
// same.
inline constexpr int kScoreAhead = 3;
// K-steps of Q a score warp holds in registers for the chunk (qk_pairs.cuh): 8 registers each.
// With 4, k-steps 0-7 of every row are held by the warps that own the row, and those bytes of the
// Q tile serve as the swap buffers (send_partials). 6: 232 us, 8: 236 (ptxas then issues the K
// loads just before their mma); with 152 registers 6 took 223-226 against 213-214.
inline constexpr int kPairQRegSteps = 4;
// The k-step of the score loop after whose loads the previous tile's softmax is placed. Item 23
// (swap by mbarrier, 144 registers): 3 and 6 the same, 4: 233 us, 2: 256, 1: 259. Now (item 24):
// 4: 215-223, 3: 219-226, 2: 223-224, 5: 223-226, 6: 227-230, 7: 218-221, 9: 222-224 at 144
// registers; at 152, 4: 213-215, 3: 212-219, 7: 221-223.
inline constexpr int kSoftmaxStep = 4;
// Registers per thread of each role after setmaxnreg. The CTA is launched with kLaunchRegs
// (__launch_bounds__(384, 1): 65536 / 384 rounded down to 8), and setmaxnreg moves registers
// between the warpgroups of that allocation only (an increase past it waits forever). The output
// warps take the rest, rounded down to 8: 176 (the most the score warps can take without lowering
// it is 152). Item 23: score warps at 136 (output 184): 236 us; 128: 236; 152: 229, the same as
// 144; 168 for all (no setmaxnreg): the output warps spill their loop state. Item 24: 152 against
// 144: 214-215 against 218-223 (the same run).
inline constexpr int kScoreRegs = 152;
inline constexpr int kLaunchRegs = 168;
inline constexpr int kOutputRegs = (12 * kLaunchRegs - 4 * kScoreRegs) / 8 / 8 * 8;

// Barrier 0 of all threads of the CTA, which the two roles reach at different instructions: the
// non-aligned form (bar.sync is barrier.sync.aligned, which requires every thread to execute the
// same instruction; compute-sanitizer's synccheck reports it from divergent code). It costs: with
// bar.sync, h_q 128 batch 64 took 266-270 us instead of 282 (H200), as the compiler no longer
// knows the warps converged after it. The only kind of barrier here: with a named barrier of the
// score warps alone (for Q), racecheck reported every handoff after it as a race
// (docs/sm80-decode.md, item 21).
__device__ __forceinline__ void cta_sync() { asm volatile("barrier.sync 0;\n" ::: "memory"); }

// Waits until the phase of `bar` with parity `parity` has completed (kernels/common/mbarrier.cuh).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  mbarrier_wait_parity(bar, parity);
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
  uint32_t tile_parity;  // g & 1: which of the two swap buffers the tile uses
  __device__ __forceinline__ TileSlot(uint32_t g, int stages)
      : stage(static_cast<int>(g % static_cast<uint32_t>(stages))),
        parity((g / static_cast<uint32_t>(stages)) & 1u),
        tile_parity(g & 1u) {}
  __device__ __forceinline__ void advance(int stages) {
    tile_parity ^= 1u;
    if (++stage == stages) {
      stage = 0;
      parity ^= 1u;
    }
  }
  // The stage of tile g - back (back < stages).
  __device__ __forceinline__ int stage_back(int back, int stages) const {
    return stage >= back ? stage - back : stage - back + stages;
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

// The swap of partial scores inside a score warp pair (qk_pairs.cuh), around the barrier of all
// threads that ends each tile: before it, send_partials stores this warp's partials of the other
// warp's rows (acc[1]); after it, receive_partials adds the other warp's partials of this warp's
// rows to its own (acc[0]): v, the whole scores of rows 16 w .. 16 w + 15 in the layout of one m16
// row block. fp32 addition commutes, so either warp's sum is the same bits. The barrier, there
// anyway, orders the stores before the loads: an mbarrier of the pair's own (arrive, then wait for
// the other warp) had cost a round trip per tile on the score warps' critical path.
//
// Two buffers, by tile parity, in the first 256 bytes (dims 0-127, k-steps 0-7) of Q rows 32 pair
// .. + 31, which only this pair's warps read, into the registers they hold for the chunk
// (kPairQRegSteps: k-steps 0-7 between the two warps), before a barrier that precedes the first
// swap. A warp writes buffer t & 1 before the barrier of tile t; the other warp read it last (tile
// t - 2) after the barrier of tile t - 2, before it reached the barrier of tile t - 1. Lane l of
// warp kg writes n8 tile nt at row 32 pair + 16 buffer + 8 kg + 2 nt + l / 16, bytes 16 (l % 16):
// a quarter warp's stores are 128 contiguous bytes.
__device__ __forceinline__ uint32_t swap_slot(uint32_t s_q, int warp, uint32_t buffer, int nt,
                                              int lane) {
  return s_q +
         ((warp / 2) * 32 + static_cast<int>(buffer) * 16 + (warp % 2) * 8 + 2 * nt + lane / 16) *
             kRowBytes +
         (lane % 16) * 16;
}
__device__ __forceinline__ void send_partials(uint32_t s_q, int warp, int lane, uint32_t buffer,
                                              const float (&acc)[2][4][4]) {
  static_assert(kPairQRegSteps >= 4, "the swap buffers are Q the pair holds in registers");
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    ptx::st_shared_v4_f32(swap_slot(s_q, warp, buffer, nt, lane), acc[1][nt]);
  }
}
__device__ __forceinline__ void receive_partials(uint32_t s_q, int warp, int lane, uint32_t buffer,
                                                 const float (&acc)[2][4][4], float (&v)[4][4]) {
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    float other[4];
    ptx::ld_shared_v4_f32(other, swap_slot(s_q, warp ^ 1, buffer, nt, lane));
#pragma unroll
    for (int k = 0; k < 4; ++k) v[nt][k] = acc[0][nt][k] + other[k];
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
  const PairScores<T, kPairQRegSteps> scores(s_q, warp, lane);
  typename PairScores<T, kPairQRegSteps>::QRegs qf;
  scores.load_q(qf);
  cta_sync();  // every score warp holds its Q registers: the swap buffers are free

  // Warp 0 reads the page ids of the tiles the output warps copy in the loop (tile t - 1 + stages
  // after the barrier of tile t), a tile ahead, and publishes them before that barrier: a
  // block-table read in the output warps' loop stalled them (O takes most of their registers).
  // With them it stores each tile's bad-token bits in the word of the tile's stage
  // (SharedStorage::bad_tokens), and those of the first `stages` tiles (copied with the output
  // warps' own reads of the ids) before the first barrier below; every score warp reads a tile's
  // word after the barrier that brings it its whole scores.
  const int stages = p.stages;
  const bool pages_lane = warp == 0;
  const int32_t* g_pages = p.block_table + int64_t{c.request} * p.block_table_stride;
  // The block-table entry of this lane's token of `tile` as read (0 past the chunk's end); checked
  // (plan::valid_page) where it is used, a tile later: checked at the read, warp 0 waited there for
  // it before the tile's first mma (SASS, docs/sm80-decode.md item 28).
  const auto id_of = [&](int tile) {
    const int pos = c.token_begin + tile * kBlockN + lane;
    return tile < n_tiles && pos < c.token_end ? g_pages[pos >> p.page_shift] : 0;
  };
  const auto store_bad_tokens = [&](int stage, int32_t id) {
    const uint32_t bits = __ballot_sync(0xffffffffu, id < 0);
    if (lane == 0) s.bad_tokens[stage] = bits;
  };
  int32_t id = pages_lane ? id_of(stages) : 0;
  ScoreState<Cfg> st;
  const int mask_from = visible_bound(p, c, row0);
  TileSlot slot(g0, stages);
  if (plan::kPageChecks && pages_lane) {
    int32_t first_ids[kMaxStages];  // all reads in flight at once
#pragma unroll
    for (int i = 0; i < kMaxStages; ++i) first_ids[i] = i < stages ? id_of(i) : 0;
    TileSlot tile = slot;
#pragma unroll
    for (int i = 0; i < kMaxStages; ++i) {
      if (i < stages) {
        store_bad_tokens(tile.stage, plan::valid_page(first_ids[i], p.num_pages));
        tile.advance(stages);
      }
    }
  }
  // Tile t's scores, then its swap; tile t's softmax runs inside the score loop of tile t + 1,
  // and the barrier of all threads that publishes P of tile t follows that loop.
  float v[4][4];  // whole scores of the tile whose softmax is pending
  uint32_t bad;   // its bad-token bits
  // Whether the next tile's copies have landed, tested before the barrier so that the test's
  // latency passes with the barrier and the swap rather than at the top of the next tile.
  bool next_ready;
  const auto test_next = [&] {
    TileSlot next = slot;
    next.advance(stages);
    next_ready = cuda::ptx::mbarrier_test_wait_parity(&s.kv_full[next.stage], next.parity);
  };
  {
    mbarrier_wait(&s.kv_full[slot.stage], slot.parity);
    float acc[2][4][4];
    scores.template run<kScoreAhead>(s_kv0 + slot.stage * kStageBytes, qf, acc);
    test_next();
    send_partials(s_q, warp, lane, slot.tile_parity, acc);
    cta_sync();  // the partials of the first tile
    receive_partials(s_q, warp, lane, slot.tile_parity, acc, v);
    bad = bad_tokens_of_stage(s, slot.stage);
    slot.advance(stages);
  }
#pragma unroll 1
  for (int t = 1; t < n_tiles; ++t, slot.advance(stages)) {
    if (!next_ready) mbarrier_wait(&s.kv_full[slot.stage], slot.parity);
    // The pages of tile t - 2 + stages, which the output warps copy after the barrier of tile
    // t - 1 (at the end of this loop). They read this buffer last after the barrier of tile t - 3.
    // The bad-token bits of `page`, voted by every score warp (the others' page is 0): inside the
    // branch below, where ptxas cannot prove the warp converged, the vote cost a WARPSYNC and a
    // re-read of the thread index per tile and pushed the first mma of the loop behind the
    // softmax (SASS, docs/sm80-decode.md item 28).
    const int32_t page = plan::valid_page(id, p.num_pages);
    const uint32_t page_bits = plan::kPageChecks ? __ballot_sync(0xffffffffu, page < 0) : 0;
    if (pages_lane && t >= 2) {
      s.tile_pages[t & 1][lane] = page;
      // Its stage held tile t - 2, whose word the score warps read before the last barrier.
      if (plan::kPageChecks && lane == 0) s.bad_tokens[slot.stage_back(2, stages)] = page_bits;
      id = id_of(stages + t - 1);
    }
    mask_full_rows<Cfg>(v, st, p, c, row0, c.token_begin + (t - 1) * kBlockN, mask_from, bad);
    float acc[2][4][4];
    const int b = (t - 1) & 1;
    scores.template run<kScoreAhead, kSoftmaxStep>(s_kv0 + slot.stage * kStageBytes, qf, acc, [&] {
      softmax_full_rows<T, Cfg>(v, st, p.scale_log2, s.p_buf[b], s.alpha_buf[b]);
    });
    test_next();
    send_partials(s_q, warp, lane, slot.tile_parity, acc);
    cta_sync();  // P of tile t - 1, the partials of tile t
    receive_partials(s_q, warp, lane, slot.tile_parity, acc, v);
    bad = bad_tokens_of_stage(s, slot.stage);
  }
  {
    const int t = n_tiles - 1, b = t & 1;
    mask_full_rows<Cfg>(v, st, p, c, row0, c.token_begin + t * kBlockN, mask_from, bad);
    softmax_full_rows<T, Cfg>(v, st, p.scale_log2, s.p_buf[b], s.alpha_buf[b]);
    cta_sync();  // P of the last tile
  }
  write_row_stats<T, Cfg>(p, s, c, row0, st, p.scale_log2, 1.0f);
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
                loader.check(loader.fetch_ids(c.token_begin + i * kBlockN)));
    ptx::cp_async_commit_group();
    cp_async_mbarrier_arrive_noinc(&s.kv_full[slot.stage]);
  }
  OutAccumulators<Cfg> o;
  zero_output<Cfg>(o);
  cta_sync();  // the score warps' Q copies have landed
  cta_sync();  // the score warps hold their Q registers
  cta_sync();  // the score warps' partials of the first tile
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

// Registers per thread from here on for the executing warpgroup (setmaxnreg, sm_90a; ptxas
// allocates the code that follows within the new budget). The toolkit's CCCL has no wrapper yet.
template <int kRegs>
__device__ __forceinline__ void set_max_registers() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (kRegs > 168) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
  } else if constexpr (kRegs < 168) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
  }
#endif
}

// The rest of the kernel for one role: every chunk of the CTA (both roles walk the same ones), the
// KV tiles of all of them numbered in sequence (TileSlot). q_loaded: the score threads issued the
// Q tile's copies of the first chunk already (not committed). Each chunk ends with a barrier of
// all threads: every read of Q, P, row_scale and the KV stages is done before the next chunk
// writes them.
template <typename T, typename Cfg>
__device__ __forceinline__ void run(const DecodeParams& p, SharedStorage<T, Cfg>& s, int m_tile,
                                    int32_t cta, bool q_loaded) {
  static_assert(Cfg::kScoreWarps == 4 && Cfg::kOutWarps == 8, "setmaxnreg is per warpgroup");
  static_assert(65536 / Cfg::kThreads / 8 * 8 == kLaunchRegs);
  static_assert(
      Cfg::kScoreWarps * kScoreRegs + Cfg::kOutWarps * kOutputRegs <= Cfg::kWarps * kLaunchRegs,
      "setmaxnreg.inc waits forever for registers the CTA does not hold");
  const int row0 = m_tile * Cfg::kRows;
  plan::ChunkIterator chunks(p.plan, p.schedule, cta, p.batch, &s.part, p.seq_lens, p.max_len);
  chunks.skip_dead_tiles(p.out_view, row0);  // var_q
  plan::Chunk c;
  uint32_t g_tile = 0;
  if (static_cast<int>(threadIdx.x) < 32 * Cfg::kScoreWarps) {
    set_max_registers<kScoreRegs>();
    bool first = true;
    while (chunks.next(&c)) {
      const int n_tiles = (c.token_end - c.token_begin + kBlockN - 1) / kBlockN;
      score_warp_chunk<T, Cfg>(p, s, row0, c, q_loaded && first, g_tile, n_tiles);
      g_tile += static_cast<uint32_t>(n_tiles);
      cta_sync();
      first = false;
    }
    if (q_loaded && first) {
      // The request has no chunk: the Q copies must land before the CTA exits.
      ptx::cp_async_commit_group();
      ptx::cp_async_wait_group<0>();
    }
  } else {
    set_max_registers<kOutputRegs>();
    while (chunks.next(&c)) {
      const int n_tiles = (c.token_end - c.token_begin + kBlockN - 1) / kBlockN;
      output_warp_chunk<T, Cfg>(p, s, row0, c, g_tile, n_tiles);
      g_tile += static_cast<uint32_t>(n_tiles);
      cta_sync();
    }
  }
}

}  // namespace roles
}  // namespace mlakit::sm80
