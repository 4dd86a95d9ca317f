// The sm90 MLA decode kernel (config.h has the roles and the shared-memory plan; the schedule is
// in docs/sm90-decode.md). Per chunk of one request's tokens (src/plan/work.cuh):
//   producer warp:  wait q_empty, TMA the Q tile (9 boxes, one per lane) onto q_full; per 64-token
//                   block: wait empty[stage], then lane j the TMA of the block's column chunk j
//                   (one or two pages) onto full[stage][j] with its byte count.
//   consumer warpgroups, out of phase: block n belongs to warpgroup n % 2 (its stage). In order
//   over the blocks, warpgroup w:
//     own block:   S = Q K^T (36 wgmma m64n64k16, each column chunk as soon as it lands); mask;
//                  new row max from the previous block's (published by the other warpgroup);
//                  P = exp2(S - max) over the stage's rope chunk; publish the max and P
//                  (every thread arrives on published[w]); O_w *= alpha; O_w += P V_w (4 wgmma
//                  m64n256k16, A = P from registers).
//     other block: wait for the other warpgroup's max and P (published[1 - w], the stage's
//                  phase); O_w *= alpha; O_w += P V_w (A = P from shared memory).
//   Widen::kFp8 (an e4m3 cache, a 16-bit q): the warpgroup that does not own a block widens it
//   in place and arrives on widened[stage], which the owner waits on before S (consume).
//   The stage is released (empty) by each warpgroup once its P V of the block has finished; on
//   the request's last block each zeroes its half of the V rows past the length first.
//   epilogue: denominators meet through shared memory; the output or a partial is written.
//   Cluster schedule (plan.h): each CTA of a cluster of S computes one chunk of the request and
//   leaves its normalized result and LSE in its own shared memory (over the KV stages); after a
//   cluster barrier CTA k merges rows [64k / S, 64(k + 1) / S) (rounded down) of all S through
//   distributed shared memory (cluster_merge.cuh) into the output, or into the cluster's partial
//   when the request's tile has several clusters.
#pragma once

#include <cuda/ptx>

#include "backends/sm90/cluster_merge.cuh"
#include "backends/sm90/config.h"
#include "backends/sm90/decode_fp8_instep.cuh"
#include "backends/sm90/decode_fp8_narrow.cuh"
#include "backends/sm90/decode_fp8_wide.cuh"
#include "backends/sm90/decode_narrow.cuh"
#include "backends/sm90/device.cuh"
#include "backends/sm90/gather.cuh"
#include "backends/sm90/launch.h"
#include "backends/sm90/params.h"
#include "backends/sm90/producer.cuh"
#include "backends/sm90/trace.cuh"
#include "backends/sm90/wgmma.cuh"
#include "backends/sm90/wide_epilogue.cuh"
#include "core/check.h"
#include "core/cuda_check.h"
#include "kernels/common/numeric.cuh"
#include "kernels/common/pdl.h"
#include "kernels/common/ptx.h"
#include "plan/work.cuh"

namespace mlakit::sm90 {

#ifdef MLAKIT_SM90_WGMMA

// This warpgroup's half of V, rows [valid, 64) of the stage, set to zero (past the request's
// length the pages hold anything, NaN in the tests: P is 0 there but 0 x NaN is not).
__device__ __forceinline__ void zero_v_rows(uint32_t kv_stage, int32_t valid, int wg, int t) {
  const int n = (kBlockN - valid) * kVChunksPerWarpgroup * 8;  // 16-byte pieces
  for (int idx = t; idx < n; idx += 128) {
    const int row = valid + idx / (kVChunksPerWarpgroup * 8);
    const int chunk = wg * kVChunksPerWarpgroup + (idx / 8) % kVChunksPerWarpgroup;
    const uint32_t at = kv_stage + chunk * kChunkBytes + row * 128 + (idx % 8) * 16;
    asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(at), "r"(0) : "memory");
  }
}

// Widen::kFp8: a consumer warpgroup (the one that does not own the block: consume's
// widen_block) widens a block of the one-scale e4m3 cache in place, once all of its column
// chunks landed (produce<..., true>): raw chunk j (64 tokens x 64 bytes, the 64-byte swizzle) lies
// at kFp8RawOffset + 4 KB j of the stage, 16-bit column chunk j at 8 KB j. Thread t widens the
// 16-byte piece t % 4 of tokens t / 4 and t / 4 + 32 of each raw chunk, exactly (dequant16 with 1:
// the scales are the consumer's factors), into two 16-byte pieces of its rows. Column chunks 0..3
// lie below the raw chunks; 4..8 overlap raw chunks 0..8 (chunk j >= 4 covers raw 2j - 9 and 2j -
// 8, all <= j), so raw 4..8 are read into registers, the warpgroup meets, then 4..8 are written.
// The RoPE chunk is e4m3 too in this cache. Ends with the writes ordered before the wgmma of either
// warpgroup (the other reads V after this one's P is published).
//
// The widening in two parts. widen_fp8_low: column chunks 0..3, which lie below the raw chunks
// (no thread overwrites bytes another reads): no meeting, so it can run while the warpgroup's
// P V products are in flight (a barrier or spin-wait there makes ptxas serialize them, C7520).
// widen_fp8_high: chunks 4..8 (read, meet, write), after them; ends with the writes fenced for
// the async proxy and the warpgroup met.
template <typename T>
__device__ __forceinline__ void widen_fp8_low(uint32_t stage_addr, int t) {
  const int u = t % 4;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t at = stage_addr + j * kChunkBytes;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int tk = t / 4 + 32 * k;
      uint32_t v[4], w[8];
      ld_shared_v4(stage_addr + kFp8RawOffset + j * kFp8RawChunkBytes + swizzled64(tk, u * 16), v);
      dequant16<T>(make_uint4(v[0], v[1], v[2], v[3]), 1.0f, w);
      st_shared_v4(at + swizzled(tk, u * 32), w[0], w[1], w[2], w[3]);
      st_shared_v4(at + swizzled(tk, u * 32 + 16), w[4], w[5], w[6], w[7]);
    }
  }
}

template <typename T>
__device__ __forceinline__ void widen_fp8_high(SmallStorage& sm, uint32_t stage_addr, int t,
                                               int wg) {
  const int u = t % 4;
  uint32_t v[kQkChunks - 4][2][4];
#pragma unroll
  for (int j = 4; j < kQkChunks; ++j) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      ld_shared_v4(
          stage_addr + kFp8RawOffset + j * kFp8RawChunkBytes + swizzled64(t / 4 + 32 * k, u * 16),
          v[j - 4][k]);
    }
  }
  dequant_sync(sm, wg, 0);
#pragma unroll
  for (int j = 4; j < kQkChunks; ++j) {
    const uint32_t at = stage_addr + j * kChunkBytes;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int tk = t / 4 + 32 * k;
      uint32_t w[8];
      dequant16<T>(make_uint4(v[j - 4][k][0], v[j - 4][k][1], v[j - 4][k][2], v[j - 4][k][3]), 1.0f,
                   w);
      st_shared_v4(at + swizzled(tk, u * 32), w[0], w[1], w[2], w[3]);
      st_shared_v4(at + swizzled(tk, u * 32 + 16), w[4], w[5], w[6], w[7]);
    }
  }
  cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);
  dequant_sync(sm, wg, 1);
}

// The whole widening at once (a chunk's first block): what widen_fp8_low then widen_fp8_high do,
// written out. Composing the two gives other SASS (the same spills), and this form is the one
// measured (bench/results/2026-11-28-h200-fp8w-split-widen).
template <typename T>
__device__ __forceinline__ void widen_fp8(SmallStorage& sm, uint32_t stage_addr, int t, int wg) {
  const int u = t % 4;
  auto load = [&](int j, uint32_t(&v)[2][4]) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      ld_shared_v4(
          stage_addr + kFp8RawOffset + j * kFp8RawChunkBytes + swizzled64(t / 4 + 32 * k, u * 16),
          v[k]);
    }
  };
  auto step = [&](int j, const uint32_t(&v)[2][4]) {
    const uint32_t at = stage_addr + j * kChunkBytes;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int tk = t / 4 + 32 * k;
      uint32_t w[8];
      dequant16<T>(make_uint4(v[k][0], v[k][1], v[k][2], v[k][3]), 1.0f, w);
      st_shared_v4(at + swizzled(tk, u * 32), w[0], w[1], w[2], w[3]);
      st_shared_v4(at + swizzled(tk, u * 32 + 16), w[4], w[5], w[6], w[7]);
    }
  };
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t v[2][4];
    load(j, v);
    step(j, v);
  }
  uint32_t v[kQkChunks - 4][2][4];
#pragma unroll
  for (int j = 4; j < kQkChunks; ++j) load(j, v[j - 4]);
  dequant_sync(sm, wg, 0);
#pragma unroll
  for (int j = 4; j < kQkChunks; ++j) step(j, v[j - 4]);
  cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);
  dequant_sync(sm, wg, 1);
}

template <typename T, Widen kWiden>
__device__ __forceinline__ void consume(const DecodeParams& p, const Smem& s, int m_tile,
                                        int32_t cta) {
  const int tid = static_cast<int>(threadIdx.x);
  // Owns the blocks of stage wg and columns 256wg.. of O. Through a shuffle so the compiler knows
  // it is the same across the warp (else it takes the own/other branch as divergent, C7520).
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int t = tid % 128;
  const int lane = t % 32;
  const int row_a = (t / 32) * 16 + lane / 4;  // the thread's rows: row_a and row_a + 8
  SmallStorage& sm = *s.small;
  const uint32_t kv_addr = ptx::smem_u32(s.kv);
  const uint64_t q_desc = smem_desc_sw128(ptx::smem_u32(s.q), 0, 1024);
  const int32_t row0 = m_tile * kRows;
  // Widen::kFp8: the e4m3 values widened exactly; the cache's scale (and q's) goes into the
  // scores' factor and the output's, as on the narrow tile (decode_fp8_narrow.cuh).
  const float scale_log2 = [&] {
    if constexpr (kWiden == Widen::kFp8) return p.scale_log2 * fp8::read_scales(p).qk;
    return p.scale_log2;
  }();
  const float v_scale = [&] {
    if constexpr (kWiden == Widen::kFp8) return fp8::read_scales(p).v;
    return 1.0f;
  }();
  const float k_scale = fp8::read_scales(p).v;  // sparse V3.2 / V4: the cache's extra scale

  // Widen::kFp8: the warpgroup that does not own block nb widens it and says so on
  // widened[stage]; the owner's chain (S, softmax, P) then starts on a widened block. For a
  // chunk's first block: all of it, first thing (widen_block). For the others: chunks 0..3
  // during the widening warpgroup's own block before, beside its P V products (their chunks
  // waited for before the P V's issue), chunks 4..8 first thing in its next iteration. Against
  // the owner widening its own block: 1.06-1.08x faster at h_q 64 and 128 (H200,
  // bench/results/2026-11-28-h200-fp8w-split-widen).
  auto widen_block = [&](uint32_t nb) {
    const uint32_t st = nb % kStages, ph = (nb / kStages) & 1;
#pragma unroll 1
    for (int j = 0; j < kQkChunks; ++j) wait_parity(&sm.full[st][j], ph);
    widen_fp8<T>(sm, kv_addr + st * kTileBytes, t, wg);
    arrive(&sm.widened[st]);  // every thread, after its writes and its proxy fence
  };

  plan::ChunkIterator chunks(p.plan, p.schedule, cta, p.batch, &sm.part, p.seq_lens, p.max_len);
  chunks.skip_dead_tiles(p.out_view, row0);  // var_q
  plan::Chunk c;
  uint32_t n_chunk = 0, n_block = 0;
  while (chunks.next(&c)) {
    // Tokens each of the two rows sees: the chunk's, and with causal MTP fewer for early tokens.
    const int32_t limit[2] = {visible_limit(p, c, row0 + row_a),
                              visible_limit(p, c, row0 + row_a + 8)};
    const OwnBlocks share = own_blocks(c, n_block, wg);
    const int32_t n_blocks = share.n, last_own = share.last;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    const uint32_t chunk_parity = n_chunk & 1;
    wait_parity(&sm.q_full, chunk_parity);
    ++n_chunk;
    if (last_own < 0 && t == 0) arrive(&sm.q_empty);

#pragma unroll 1
    for (int32_t b = 0; b < n_blocks; ++b, ++n_block) {
      trace(wg, 0);
      const int32_t tok0 = c.token_begin + b * kBlockN;
      const uint32_t stage = n_block % kStages, phase = (n_block / kStages) & 1;
      const uint32_t kv_stage = kv_addr + stage * kTileBytes;
      const uint32_t p_tile = kv_stage + kPChunk * kChunkBytes;
      const int32_t valid = c.token_end - tok0;
      const bool own = stage == static_cast<uint32_t>(wg);
      // V_w: tokens x 256 columns, MN-major (column blocks of 64 are 8 KB apart: lbo; 8-token
      // groups 1 KB: sbo); P: 64 x 64 tokens, K-major.
      const uint64_t v_desc =
          smem_desc_sw128(kv_stage + wg * kVChunksPerWarpgroup * kChunkBytes, kChunkBytes, 1024);
      MaxStep step[2];
      uint32_t pr[16];  // own block: P as the A fragments of P V, 4 per 16 tokens
      if (own) {
        // Sparse decode of the V3.2 or V4 cache: the owner widens the block first (gather.cuh).
        if constexpr (kWiden == Widen::kV4) {
          wait_parity(&sm.full[stage][kPChunk], phase);
          dequant_v4<Layout<kRows>, T>(sm, kv_stage, stage, t, wg, k_scale);
        } else if constexpr (kWiden == Widen::kFp8) {
          wait_parity(&sm.widened[stage], phase);  // by the other warpgroup (widen_block)
        } else if constexpr (kWiden == Widen::kGather) {
          if (p.fill == Fill::kGatherV32) {
            wait_parity(&sm.full[stage][kPChunk], phase);
            dequant_v32<Layout<kRows>, T>(sm, kv_stage, stage, t, wg, k_scale);
          }
        }
        // Own block: S = Q K^T, chunk by chunk as the copies land.
        const uint64_t kv_desc = smem_desc_sw128(kv_stage, 0, 1024);
        float sc[32];
#pragma unroll
        for (int j = 0; j < kQkChunks; ++j) {
          wait_parity(&sm.full[stage][j], phase);
          if (j == 0 && n_block == 0 && t == 0) grid_stamp(2);
          if (j == 0) trace(wg, 1);
          if (j == kQkChunks - 1) trace(wg, 2);
          wgmma_fence();  // after each wait, or ptxas serializes the wgmmas (C7520)
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            const uint32_t at = j * kChunkBytes + kk * 32;
            wgmma_m64n64k16<T>(sc, desc_advance(q_desc, at), desc_advance(kv_desc, at),
                               (j | kk) != 0 ? 1 : 0);
          }
        }
        wgmma_commit_group();
        wgmma_wait_group<0>();
        fence_accumulators(sc);
        trace(wg, 3);
        if (b == last_own && t == 0) arrive(&sm.q_empty);

        // Mask (past the limits, and tokens of bad pages), row max (the four lanes of a row), new
        // max from the one before.
        const uint64_t bad =
            ptx::ld_shared_u64_here(ptx::smem_u32(&sm.bad_tokens[stage]));  // page_mask.cuh
        if (tok0 + kBlockN > min(limit[0], limit[1]) || bad != 0) {
          const int32_t j_base = 2 * (lane % 4);
#pragma unroll
          for (int i = 0; i < 32; ++i) {
            const int32_t j = j_base + 8 * (i / 4) + (i % 2);
            if (tok0 + j >= limit[(i / 2) % 2] || plan::bad_token(bad, j)) sc[i] = -INFINITY;
          }
        }
        softmax_to_p<T>(sc, m, l, step, pr, sm.row_max[wg], p_tile, scale_log2, row_a, lane);
        if (valid < kBlockN) zero_v_rows(kv_stage, valid, wg, t);
        cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // P and zeros, for wgmma
        // P for the other warpgroup (this one reads its own from registers).
        arrive(&sm.published[wg]);  // every thread: each orders its own stores (and reads)
        trace(wg, 4);
        rescale(o, step);
        if constexpr (kWiden == Widen::kFp8) {
          // The next block's chunks landed (widened below while this P V runs).
          if (b + 1 < n_blocks) {
            const uint32_t st = (n_block + 1) % kStages, ph = ((n_block + 1) / kStages) & 1;
#pragma unroll 1
            for (int j = 0; j < kQkChunks; ++j) wait_parity(&sm.full[st][j], ph);
          }
        }
        // O_w += P V_w with P from registers. Each P V is issued where its A operand was made:
        // across the branch, ptxas serializes the wgmmas (C7520).
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk) {
          const uint32_t a[4] = {pr[4 * kk], pr[4 * kk + 1], pr[4 * kk + 2], pr[4 * kk + 3]};
          wgmma_m64n256k16_rs_tb<T>(o, a, desc_advance(v_desc, kk * 16 * 128), 1);
        }
        if constexpr (kWiden == Widen::kFp8) {
          // The next block is the other warpgroup's: widened while this P V runs (its chunks
          // waited for before the P V's issue, above: no spin-wait while it is in flight).
          wgmma_commit_group();
          // (Split this way, ptxas spills 60 bytes in these kernels, 8 before; measured 1.06-1.08x
          // faster all the same.)
          if (b + 1 < n_blocks)
            widen_fp8_low<T>(kv_addr + ((n_block + 1) % kStages) * kTileBytes, t);
        }
      } else {
        if constexpr (kWiden == Widen::kFp8) {
          if (b == 0) {
            widen_block(n_block);  // a chunk's first block (no own block before it)
          } else {
            // Chunks 0..3 were widened beside this warpgroup's P V of block b - 1: the rest.
            widen_fp8_high<T>(sm, kv_stage, t, wg);
            arrive(&sm.widened[stage]);
          }
        }
        // The other warpgroup's block: wait for its max and P, then this half of O.
#pragma unroll
        for (int j = 0; j < kVChunksPerWarpgroup; ++j) {
          wait_parity(&sm.full[stage][wg * kVChunksPerWarpgroup + j], phase);
        }
        trace(wg, 6);
        wait_parity(&sm.published[wg ^ 1], phase);
        trace(wg, 7);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          step[e] = max_step(m[e], sm.row_max[wg ^ 1][row_a + 8 * e], scale_log2);
          l[e] *= step[e].alpha;
        }
        if (valid < kBlockN) {
          zero_v_rows(kv_stage, valid, wg, t);
          cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);
        }
        rescale(o, step);
        // O_w += P V_w with P from shared memory.
        const uint64_t p_desc = smem_desc_sw128(p_tile, 0, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk) {
          wgmma_m64n256k16_tb<T>(o, desc_advance(p_desc, kk * 32),
                                 desc_advance(v_desc, kk * 16 * 128), 1);
        }
      }
      // Waited for at once, so the stage goes back as early as it can (a later Q K^T in flight
      // meanwhile would hold it: ptxas serializes the wgmmas when told to wait for the older
      // group only, C7514).
      wgmma_commit_group();
      wgmma_wait_group<0>();
      fence_accumulators(o);
      trace(wg, 5);
      if (t == 0) arrive(&sm.empty[stage]);
    }
    if (wg == 0 && t == 0) {
      grid_stamp(3);
    }

    write_wide_chunk<T>(p, s, c, row0, m, l, o, scale_log2, /*lse_shift_log2=*/0.0f, v_scale,
                        chunk_parity);
  }
  if (tid == 0) grid_stamp(4);
}

#endif  // MLAKIT_SM90_WGMMA

// The shared-memory plan of an instantiation (config.h).
template <int kTileRows, typename T, bool kFp8Kv, Widen kWiden = Widen::kNone>
using LayoutOf = std::conditional_t<
    !kFp8Kv, Layout<kTileRows>,
    std::conditional_t<kTileRows == kRows,
                       std::conditional_t<kWiden == Widen::kQSplit, Fp8QSplitLayout, Fp8WideLayout>,
                       Fp8Layout<kTileRows, sizeof(T), kWiden == Widen::kQSplit>>>;

// kTileRows: 64 (the wide tile) or 16 / 32 (the narrow tile, decode_narrow.cuh). T: q's type (and
// the math's for a 16-bit q); TOut: out's. kFp8Kv: an e4m3 cache (decode_fp8_narrow.cuh, and with
// an e4m3 q (T uint8_t) also the wide tile, decode_fp8_wide.cuh). kWiden: what the 16-bit tiles
// widen in shared memory (params.h): sparse decode of the V4 cache, or the one-scale e4m3 cache
// with a 16-bit q on the wide tile; kNone for every other problem.
template <typename T, int kTileRows, typename TOut, bool kFp8Kv, Widen kWiden>
__global__ void __launch_bounds__(kThreads, 1)
    decode_kernel(const __grid_constant__ DecodeParams p) {
  using L = LayoutOf<kTileRows, T, kFp8Kv, kWiden>;
  constexpr bool kNarrow = kTileRows != kRows;
  constexpr bool kQSplit = kWiden == Widen::kQSplit;
  static_assert(!kFp8Kv || kNarrow || std::is_same_v<T, uint8_t>,
                "a 16-bit q with the fp8 cache runs the narrow tile");
  static_assert(kFp8Kv || std::is_same_v<T, TOut>, "a 16-bit cache writes its own type");
  static_assert(
      kWiden == Widen::kNone || kWiden == Widen::kQSplit || kWiden == Widen::kInStep || !kFp8Kv,
      "widened caches run the 16-bit tiles");
  static_assert(kWiden != Widen::kInStep || (kFp8Kv && !kNarrow && std::is_same_v<T, uint8_t>),
                "the in-step tile runs an e4m3 cache and q in tiles of 64 rows");
  static_assert(!kQSplit || (kFp8Kv && (kNarrow ? std::is_same_v<T, __nv_bfloat16>
                                                : std::is_same_v<T, uint8_t>)),
                "a split q runs the e4m3 wide tile (split by the launch) or the narrow tile (bf16, "
                "split by the consumers)");
  static_assert(kWiden != Widen::kFp8 || !kNarrow, "the widened e4m3 cache runs the wide tile");
  static_assert(kWiden != Widen::kGather || !kFp8Kv, "the gather runs the 16-bit tiles");
  constexpr bool kV4 = kWiden == Widen::kV4;
  // Sparse kernels (a gather, never TMA pages): the launch gives them sparse problems only, and
  // dense problems only to the others, so neither carries the other's code (the dense loops
  // with the gather's and V3.2 widening's code inlined beside them, under a run-time test, were
  // 4x longer in SASS and ran small batches up to 15% slower: docs/sm90-decode.md).
  [[maybe_unused]] constexpr bool kGathers = kV4 || kWiden == Widen::kGather;
  constexpr RegisterSplit kRegisters = register_split(kTileRows, kFp8Kv, kV4);
#ifdef MLAKIT_SM90_WGMMA
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = ptx::smem_u32(smem_raw);
  uint8_t* base = smem_raw + (((raw + 1023) & ~1023u) - raw);
  const Smem s{.q = base + L::kQOffset,
               .kv = base + L::kKvOffset,
               .exchange = reinterpret_cast<float*>(base + L::kExchangeOffset),
               .small = reinterpret_cast<SmallStorage*>(base + L::kSmallOffset)};
  SmallStorage& sm = *s.small;
  const int32_t m_tiles = (p.rows + kTileRows - 1) / kTileRows;
  // Cluster schedule: blockIdx.x = (request * m_tiles + tile) * C S + split, C clusters of S per
  // (request, tile); cta = request * C S + split for the chunk iterator. Else the query tile
  // fastest.
  const bool clustered = p.schedule == plan::Schedule::kCluster;
  const int32_t splits = clustered ? p.plan.max_splits : 1;  // C S
  const int32_t tile_index = static_cast<int32_t>(blockIdx.x) / splits;
  const int32_t split = static_cast<int32_t>(blockIdx.x) % splits;
  const int m_tile = static_cast<int>(clustered ? tile_index % m_tiles : blockIdx.x % m_tiles);
  const int32_t cta = clustered ? tile_index / m_tiles * splits + split
                                : static_cast<int32_t>(blockIdx.x / m_tiles);
  // A split q on the wide tile has no cluster tactic (Fp8QSplitLayout): its merge is not compiled.
  constexpr bool kMerges = !kQSplit || kNarrow;
  const bool merges = kMerges && clustered && p.plan.cluster_size > 1;
  if (threadIdx.x == 0) grid_stamp(0);
  if (threadIdx.x == 0) {
    // The tensor maps are kernel parameters (no earlier kernel writes them): into the TMA unit's
    // cache before the PDL wait, as CUTLASS mainloops do.
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(&p.q_map) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(&p.kv_map) : "memory");
    for (int i = 0; i < L::kStages; ++i) {
      // TMA: the producer's arrival and the bytes; a gather: every producer thread.
      for (int j = 0; j < kQkChunks; ++j) {
        cuda::ptx::mbarrier_init(&sm.full[i][j], kGathers ? kGatherThreads : 1);
      }
      cuda::ptx::mbarrier_init(&sm.empty[i], L::kEmptyArrivals);
      for (int j = 0; j < kQkChunks; ++j) cuda::ptx::mbarrier_init(&sm.chunk_empty[i][j], 1);
    }
    for (int w = 0; w < 2; ++w) cuda::ptx::mbarrier_init(&sm.published[w], 128);
    cuda::ptx::mbarrier_init(&sm.q_full, 1);
    cuda::ptx::mbarrier_init(&sm.q_empty, 2);
    for (int w = 0; w < 2; ++w) cuda::ptx::mbarrier_init(&sm.wg_sync[w], 128);
    for (int w = 0; w < 2; ++w) cuda::ptx::mbarrier_init(&sm.dequant_sync[w], 128);
    for (int i = 0; i < kMaxStages; ++i) cuda::ptx::mbarrier_init(&sm.widened[i], 128);
    for (int i = 0; i < kMaxStages; ++i) sm.bad_tokens[i] = 0;
    trace_reset();
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
  }
  // Everything below reads seq_lens or the plan (PDL contract, kernels/common/pdl.h).
  pdl::griddepcontrol_wait();
  pdl::griddepcontrol_launch_dependents();
  if (clustered && splits > p.plan.cluster_size && m_tile == 0 && split == 0 && threadIdx.x == 0) {
    // Several clusters per request: the combine kernel merges their C partials.
    const int32_t request = cta / splits, clusters = splits / p.plan.cluster_size;
    p.plan.requests[request] =
        plan::RequestMeta{.seq_len = plan::clamped_len(p.seq_lens, request, p.batch, p.max_len),
                          .num_splits = clusters,
                          .first = 0,
                          .split_offset = request * clusters};
  }
  if (p.schedule == plan::Schedule::kPersistent && threadIdx.x < 32) {
    const plan::PartPlan pp = plan::part_for_cta(p, cta);
    if (threadIdx.x == 0) sm.part = pp;
  }
  __syncthreads();
  if (threadIdx.x == 0) grid_stamp(1);
  if (threadIdx.x >= kConsumerThreads) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters.producer));
    // Sparse decode: the whole producer warpgroup gathers tokens (16-bit q only).
    bool gathers = false;
    if constexpr (kGathers) {
      produce_gather<L, kTileRows, T, kV4>(p, s, m_tile, cta);
      gathers = true;
    }
    if (!gathers && threadIdx.x < kConsumerThreads + 32) {
      produce<L, kTileRows, kWiden == Widen::kFp8>(p, s, m_tile, cta);
    }
#ifdef MLAKIT_SM90_TRACE
    if (!gathers && threadIdx.x >= kConsumerThreads + 32 && threadIdx.x < kConsumerThreads + 64 &&
        blockIdx.x == 0) {
      watch<L>(p, s, m_tile * kTileRows, cta);
    }
#endif
    if (merges) {
      cluster_sync();  // the consumers' results are out
      cluster_sync();  // and merged
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters.consumer));
    if constexpr (kWiden == Widen::kInStep) {
      consume_fp8_instep<TOut>(p, s, m_tile, cta);
    } else if constexpr (kFp8Kv && !kNarrow) {
      consume_fp8_wide<TOut, kQSplit>(p, s, m_tile, cta);
    } else if constexpr (kFp8Kv) {
      consume_fp8_narrow<T, TOut, kTileRows, kQSplit>(p, s, m_tile, cta);
    } else if constexpr (kNarrow) {
      consume_narrow<T, kTileRows, kWiden>(p, s, m_tile, cta);
    } else {
      consume<T, kWiden>(p, s, m_tile, cta);
    }
    if constexpr (kMerges) {
      if (merges) {
        cluster_sync();  // every CTA's result and LSE in its shared memory
        merge_cluster<TOut, kTileRows>(p, s.kv, sm, m_tile, cta / splits,
                                       split / p.plan.cluster_size);
        cluster_sync();  // no CTA leaves while another reads its shared memory
      }
    }
  }
  if (threadIdx.x == 0) grid_stamp(5);
  trace_finish();
#endif
}

template <typename T, int kTileRows, typename TOut, bool kFp8Kv, Widen kWiden>
Status prepare_decode() {
  return prepare_kernel(
      reinterpret_cast<const void*>(&decode_kernel<T, kTileRows, TOut, kFp8Kv, kWiden>),
      LayoutOf<kTileRows, T, kFp8Kv, kWiden>::kSmemBytes);
}

template <typename T, int kTileRows, typename TOut, bool kFp8Kv, Widen kWiden>
Status launch_decode(const DecodeParams& p, dim3 grid, int cluster, cudaStream_t stream, bool pdl) {
  trace_print_at_exit();
  MLAKIT_CUDA_RETURN(pdl::launch_clustered(decode_kernel<T, kTileRows, TOut, kFp8Kv, kWiden>, grid,
                                           dim3(kThreads),
                                           LayoutOf<kTileRows, T, kFp8Kv, kWiden>::kSmemBytes,
                                           stream, pdl, static_cast<unsigned>(cluster), p));
  return Status::Ok();
}

// How many clusters of `cluster` CTAs of the kernel the device runs at once (one CTA per SM; a
// cluster's CTAs share a GPC, so this can be less than SMs / cluster).
template <typename T, int kTileRows, typename TOut, bool kFp8Kv, Widen kWiden>
Status max_active_clusters(int cluster, int* count) {
  return count_active_clusters(
      reinterpret_cast<const void*>(&decode_kernel<T, kTileRows, TOut, kFp8Kv, kWiden>), kThreads,
      LayoutOf<kTileRows, T, kFp8Kv, kWiden>::kSmemBytes, cluster, count);
}

// The entry of one instantiation (launch.h); each decode_<dtype>*.cu defines one.
template <typename T, int kTileRows, typename TOut = T, bool kFp8Kv = false,
          Widen kWiden = Widen::kNone>
const DecodeKernel& decode_kernel_entry() {
  static constexpr DecodeKernel kEntry{
      .prepare = prepare_decode<T, kTileRows, TOut, kFp8Kv, kWiden>,
      .launch = launch_decode<T, kTileRows, TOut, kFp8Kv, kWiden>,
      .max_active_clusters = max_active_clusters<T, kTileRows, TOut, kFp8Kv, kWiden>};
  return kEntry;
}

}  // namespace mlakit::sm90
