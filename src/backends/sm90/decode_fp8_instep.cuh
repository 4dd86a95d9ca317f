// The in-step wide tile's consumers for an fp8 (e4m3) cache and an e4m3 q (Widen::kInStep; the
// shared memory of Fp8WideLayout): 64 query rows; the blocks go in pairs, block 2k to warpgroup 0
// and 2k + 1 to warpgroup 1 (by the CTA's block count), and both warpgroups run each step of a
// pair at once, so their tensor work overlaps instead of forming the out-of-phase tile's chain
// (decode_fp8_wide.cuh: one warpgroup's S, then its softmax, then the other's P V, block after
// block). Per pair, warpgroup w:
//   S = Q K^T      of its block: 18 wgmma m64n64k32.e4m3 (A = Q, B = K, both K-major), the even
//                  and the odd column chunks into two accumulators, as the out-of-phase tile
//   mask; row max  over its block and the running max (the four lanes of a row); the rows' maxima
//                  of both warpgroups meet in shared memory (barrier A), so both take the same new
//                  max and factor alpha; lazily: the max moves only past 2^kLazyLog2 in P's units
//   P^T            exp2(S - max) times 2^kPLog2 as e4m3 into the block's P^T tile (64 query rows x
//                  64 tokens, the 64-byte swizzle, tokens in the order of instep_token: a row's 8
//                  values of a k-step are one 8-byte store)
//   V^T            of its 256 output dims, for both blocks, loaded into registers and
//                  byte-transposed as the fp8 narrow tile does (decode_fp8_narrow.cuh), 8 dims a
//                  thread: thread row group G = 8 warp + lane / 4 holds dims 256 w + 8 G .. + 7,
//                  value (tile mt, row half e) being dim 256 w + 8 G + 4 e + mt; the first block's
//                  before barrier B, the second's k-steps as the first's products free registers
//   barrier B      both P^T tiles written (and whether any row's max moved: bar.red.or)
//   O^T *= alpha   per query row (a column of O^T), from shared memory, only when one moved
//   O^T += V^T P^T 2 blocks x 2 k-steps x 4 wgmma m64n64k32.e4m3 (A = V^T from registers, B = the
//                  block's P^T); both stages go back once issued (every consumer thread arrives)
// The rows' state (max, sum) is per thread for two rows as on the wide tile; the outputs are O^T
// as on the narrow tile, written from registers: each thread's 8 dims of a row are 16 bytes of
// out (or 32 of a partial, or of the cluster merge's rows over the stages).
// Numbers (docs/fp8-decode.md; H200, settled, bench/results/2026-11-29-h200-fp8-instep): 1.06-1.13x
// the out-of-phase tile from 128 query tiles (h_q 128, b 64, L 4096: 121.2 us against 130.8),
// 0.73-0.90x at batch 1-8, where it is not the default.
#pragma once

#include <cuda/ptx>

#include "backends/sm90/config.h"
#include "backends/sm90/decode_fp8_narrow.cuh"
#include "backends/sm90/device.cuh"
#include "backends/sm90/params.h"
#include "backends/sm90/trace.cuh"
#include "backends/sm90/wgmma.cuh"
#include "kernels/common/fp8.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/ptx.h"
#include "plan/work.cuh"

namespace mlakit::sm90 {

#ifdef MLAKIT_SM90_WGMMA

// The in-step tile's scratch in Fp8WideLayout's V^T area: the pair's two P^T tiles, then per
// query row the pair's alpha, the chunk's max and each row's output factor.
struct InStepScratch {
  static constexpr int kPtBytes = kRows * kBlockN;  // one P^T tile: 64 rows x 64 e4m3 tokens
  static constexpr int kAlphaOffset = 2 * kPtBytes;
  static constexpr int kMaxOffset = kAlphaOffset + kRows * 4;
  static constexpr int kFactorOffset = kMaxOffset + kRows * 4;
  static constexpr int kBytes = kFactorOffset + kRows * 4;
  static_assert(kBytes <= 2 * Fp8WideLayout::kVtBytes, "fits in the V^T tiles' bytes");
  static_assert(Fp8WideLayout::kVtOffset % 1024 == 0, "P^T tiles at swizzle-atom alignment");
};

// The k order of the in-step tile's P^T (and of its V^T fragments) within a k-step of 32
// tokens: token 8 a + 2 q + b (a, b in the thread's S accumulator: q = lane % 4, value i = 4 a +
// 2 e + b) sits at position 8 q + 2 a + (b ^ (q & 1)), so that a thread's 8 values of a row and
// k-step are one 8-byte store, and a warp's V loads (positions 16 h + 4 q + j for its 4 quads)
// read tokens of both parities (two wavefronts for 256 bytes). instep_token: position -> token.
__device__ __forceinline__ int instep_token(int pos) {
  const int q = pos / 8, a = (pos % 8) / 2, b = (pos % 2) ^ (q & 1);
  return 8 * a + 2 * q + b;
}

// P against a running max that moves only past 2^kLazyLog2 (consume_fp8_instep) is at most
// 2^kLazyLog2, so it carries 2^kPLog2 (not the other tiles' 2^8): at most 256, within e4m3's 448;
// P from 2^-16 on survives.
inline constexpr float kLazyLog2 = 1.0f;
inline constexpr float kPLog2 = 7.0f;

template <typename TOut>
__device__ __forceinline__ void consume_fp8_instep(const DecodeParams& p, const Smem& s, int m_tile,
                                                   int32_t cta) {
  using L = Fp8WideLayout;
  using X = InStepScratch;
  constexpr int kMTiles = 4;  // O^T: this warpgroup's 256 output dims as 4 products of 64
  const int tid = static_cast<int>(threadIdx.x);
  // Through a shuffle so the compiler knows it is the same across the warp.
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int t = tid % 128;
  const int lane = t % 32, warp = t / 32, q = lane % 4;
  const int row_a = 16 * warp + lane / 4;  // S: the thread's rows row_a and row_a + 8
  const int group = 8 * warp + lane / 4;   // O^T: the thread's dims 256 wg + 8 group .. + 7
  SmallStorage& sm = *s.small;
  const uint64_t q_desc = smem_desc_sw64(ptx::smem_u32(s.q), 512);
  uint8_t* const scratch = s.kv + L::kStages * L::kStageBytes;
  float* const alpha_buf = reinterpret_cast<float*>(scratch + X::kAlphaOffset);
  float* const max_buf = reinterpret_cast<float*>(scratch + X::kMaxOffset);
  float* const factor_buf = reinterpret_cast<float*>(scratch + X::kFactorOffset);
  const uint32_t pt_addr = ptx::smem_u32(scratch);
  const int32_t row0 = m_tile * kRows;
  const fp8::Scales scales = fp8::read_scales(p);
  const float scale_log2 = p.scale_log2 * scales.qk;
  // V: this thread's 8 bytes of a token, in column chunk 4 wg + warp, 16-byte unit u, half hb.
  // Position 16 h + 4 q + j of a k-step kk is token 32 kk + instep_token(16 h + 4 q + j % 2) +
  // 8 (j / 2), whose swizzle phase ((token >> 1) & 3) is 2 h + q / 2 whatever j and kk: its
  // bytes at v_off[h][j % 2] + 512 (j / 2) + 2048 kk of the chunk.
  const int u = (lane / 4) / 2, hb = (lane / 4) % 2;
  uint32_t v_off[2][2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int jb = 0; jb < 2; ++jb) {
      v_off[h][jb] = instep_token(16 * h + 4 * q + jb) * 64 + ((u ^ (2 * h + q / 2)) << 4) + 8 * hb;
    }
  }

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
    float o[kMTiles][32];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int i = 0; i < 32; ++i) o[mt][i] = 0.0f;
    }
    const uint32_t chunk_parity = n_chunk & 1;
    wait_parity(&sm.q_full, chunk_parity);
    ++n_chunk;
    if (last_own < 0 && t == 0) arrive(&sm.q_empty);

    // Pair k holds the blocks 2k (warpgroup 0's) and 2k + 1 by the CTA's count; the chunk's
    // first and last pairs may hold one of them.
    const uint32_t pair_end = (n_block + static_cast<uint32_t>(n_blocks) + 1) / 2;
#pragma unroll 1
    for (uint32_t pair = n_block / 2; pair < pair_end; ++pair) {
      trace(wg, 0);
      // Through a shuffle so that ptxas takes the branches on them as uniform (else it
      // serializes the wgmmas inside them, C7520).
      bool has[2];
#pragma unroll
      for (int sl = 0; sl < 2; ++sl) {
        const uint32_t nb = 2 * pair + sl;
        has[sl] = __shfl_sync(0xffffffffu,
                              static_cast<int>(nb >= n_block &&
                                               nb < n_block + static_cast<uint32_t>(n_blocks)),
                              0) != 0;
      }
      const bool mine = wg == 0 ? has[0] : has[1];
      const int32_t b = static_cast<int32_t>(2 * pair + wg - n_block);  // if mine
      const int32_t tok0 = c.token_begin + b * kBlockN;
      const uint32_t my_nb = 2 * pair + wg;
      const uint32_t my_stage = my_nb % L::kStages, my_phase = (my_nb / L::kStages) & 1;
      float sc[2][32];
      float mx[2] = {m[0], m[1]};
      if (mine) {
        const uint8_t* const kv_stage = s.kv + my_stage * L::kStageBytes;
        const uint64_t k_desc = smem_desc_sw64(ptx::smem_u32(kv_stage), 512);
#pragma unroll
        for (int j = 0; j < kQkChunks; ++j) {
          wait_parity(&sm.full[my_stage][j], my_phase);
          if (j == 0 && my_nb == 0 && t == 0) grid_stamp(2);
          if (j == 0) trace(wg, 1);
          wgmma_fence();  // after each wait, or ptxas serializes the wgmmas (C7520)
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            wgmma_m64n64k32_e4m3(sc[j % 2], desc_advance(q_desc, j * L::kQChunkBytes + kk * 32),
                                 desc_advance(k_desc, j * L::kKvChunkBytes + kk * 32),
                                 (j >= 2 || kk != 0) ? 1 : 0);
          }
        }
        wgmma_commit_group();
        wgmma_wait_group<0>();
        fence_accumulators(sc[0]);
        fence_accumulators(sc[1]);
        trace(wg, 3);
        if (b == last_own && t == 0) arrive(&sm.q_empty);
#pragma unroll
        for (int i = 0; i < 32; ++i) sc[0][i] += sc[1][i];
        // Mask (past the limits, and tokens of bad pages).
        const uint64_t bad =
            ptx::ld_shared_u64_here(ptx::smem_u32(&sm.bad_tokens[my_stage]));  // page_mask.cuh
        if (tok0 + kBlockN > min(limit[0], limit[1]) || bad != 0) {
#pragma unroll
          for (int i = 0; i < 32; ++i) {
            const int32_t j = 2 * q + 8 * (i / 4) + (i % 2);
            if (tok0 + j >= limit[(i / 2) % 2] || plan::bad_token(bad, j)) sc[0][i] = -INFINITY;
          }
        }
#pragma unroll
        for (int i = 0; i < 32; ++i) mx[(i / 2) % 2] = fmaxf(mx[(i / 2) % 2], sc[0][i]);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 1));
          mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 2));
        }
      }
      if (q == 0) {
        sm.row_max[wg][row_a] = mx[0];
        sm.row_max[wg][row_a + 8] = mx[1];
      }
      consumer_sync(kEpilogueBarrier);  // A: both warpgroups' maxima
      MaxStep step[2];
      bool moved = false;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int row = row_a + 8 * e;
        // Lazy: the running max moves only when the pair's passes it by more than 2^kLazyLog2 in
        // P's units (both warpgroups decide alike, from the same floats), so O^T is rescaled in a
        // few pairs of a chunk, not in nearly every one (any of the 64 rows moving rescales all).
        const float cand = fmaxf(sm.row_max[0][row], sm.row_max[1][row]);
        const bool move = m[e] == -INFINITY || (cand - m[e]) * scale_log2 > kLazyLog2;
        step[e] = move ? max_step(m[e], cand, scale_log2) : MaxStep{m[e] * scale_log2, 1.0f};
        moved |= step[e].alpha != 1.0f;
        if (wg == 0 && q == 0) alpha_buf[row] = step[e].alpha;
      }
      float sum[2] = {0.0f, 0.0f};
      if (mine) {
        // P times 2^8 as e4m3 into this block's P^T tile (instep_position): value i is row
        // row_a + 8 ((i / 2) % 2), token 8 (i / 4) + 2 q + i % 2, so a row's 8 values of a k-step
        // are the 8 bytes at position 8 q (byte pairs swapped for odd q): one 8-byte store.
        uint8_t* const pt = scratch + wg * X::kPtBytes;
        const uint32_t swap = (q & 1) ? 0x2301u : 0x3210u;  // prmt: the pair's bytes in order
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            uint32_t w[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              uint32_t bytes[2];
#pragma unroll
              for (int g = 0; g < 2; ++g) {
                const int i = 4 * (4 * kk + 2 * h + g) + 2 * e;
                const float p0 =
                    ptx::ex2_approx_ftz_f32(sc[0][i] * scale_log2 - (step[e].scaled - kPLog2));
                const float p1 =
                    ptx::ex2_approx_ftz_f32(sc[0][i + 1] * scale_log2 - (step[e].scaled - kPLog2));
                sum[e] += p0 + p1;
                bytes[g] = fp8::prmt(fp8::narrow2(p0, p1), 0u, swap);
              }
              w[h] = bytes[0] | (bytes[1] << 16);
            }
            const int row = row_a + 8 * e;
            *reinterpret_cast<uint2*>(pt + swizzled64(row, 32 * kk + 8 * q)) =
                make_uint2(w[0], w[1]);
          }
        }
      }
#pragma unroll
      for (int e = 0; e < 2; ++e) l[e] = l[e] * step[e].alpha + sum[e];

      // V^T of this warpgroup's dims, one block's k-step (32 tokens) at a time, from registers
      // (tokens in the k order of instep_token; past the chunk's end zeros: the pages hold
      // anything there, NaN in the tests, and 0 x NaN is not 0). A missing block (a chunk's first
      // or last pair) takes zeros: its products run all the same, against the other block's P^T
      // (finite), so that every wgmma of the pair is unconditional.
      const auto load_v = [&](int sl, int kk, uint32_t(&a)[kMTiles][4]) {
        if (!has[sl]) {
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
            for (int r = 0; r < 4; ++r) a[mt][r] = 0u;
          }
          return;
        }
        const uint32_t nb = 2 * pair + sl;
        const uint32_t stage = nb % L::kStages, phase = (nb / L::kStages) & 1;
        const int32_t valid =
            c.token_end - (c.token_begin + static_cast<int32_t>(nb - n_block) * kBlockN);
        const int chunk = 4 * wg + warp;
        if (kk == 0 && sl != wg) wait_parity(&sm.full[stage][chunk], phase);
        const uint8_t* const v_chunk = s.kv + stage * L::kStageBytes + chunk * L::kKvChunkBytes;
        const bool tail = __shfl_sync(0xffffffffu, static_cast<int>(valid < kBlockN), 0) != 0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          uint2 x[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            x[j] = *reinterpret_cast<const uint2*>(v_chunk + v_off[h][j % 2] + 512 * (j / 2) +
                                                   2048 * kk);
          }
          if (tail) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              if (32 * kk + instep_token(16 * h + 4 * q + j) >= valid) x[j] = make_uint2(0, 0);
            }
          }
#pragma unroll
          for (int k = 0; k < 2; ++k) {
            const uint32_t rows[4] = {k == 0 ? x[0].x : x[0].y, k == 0 ? x[1].x : x[1].y,
                                      k == 0 ? x[2].x : x[2].y, k == 0 ? x[3].x : x[3].y};
            uint32_t dims[4];
            fp8::transpose4x4(rows, dims);
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i][k + 2 * h] = dims[i];
          }
        }
      };
      const auto issue = [&](int sl, int kk, const uint32_t(&a)[kMTiles][4]) {
        const int tile = has[sl] ? sl : 1 - sl;
        const uint64_t pt_desc = smem_desc_sw64(pt_addr + tile * X::kPtBytes, 512);
        wgmma_fence();
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          wgmma_m64n64k32_e4m3_rs(o[mt], a[mt], desc_advance(pt_desc, kk * 32), 1);
        }
        wgmma_commit_group();
      };
      // The first block's two k-steps before the barrier (V does not wait for P), the second's
      // each once the products of the buffer it takes are done.
      uint32_t a[2][kMTiles][4];
      load_v(0, 0, a[0]);
      load_v(0, 1, a[1]);
      cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // P^T, for wgmma
      // B: both P^T tiles are written; and whether any row's max moved.
      if (consumer_sync_or(kEpilogueBarrier, moved)) {
#pragma unroll
        for (int ci = 0; ci < 16; ++ci) {
          const float alpha = alpha_buf[narrow_col(lane, ci)];
          const int i0 = 4 * (ci / 2) + ci % 2;
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            o[mt][i0] *= alpha;
            o[mt][i0 + 2] *= alpha;
          }
        }
      }
      trace(wg, 4);
      issue(0, 0, a[0]);
      issue(0, 1, a[1]);
      wgmma_wait_group<1>();
      load_v(1, 0, a[0]);
      issue(1, 0, a[0]);
      wgmma_wait_group<1>();
      load_v(1, 1, a[1]);
      issue(1, 1, a[1]);
      // V is in registers (its loads have landed once the wgmmas reading them have issued) and
      // this warpgroup's S is done: every consumer thread gives both stages back.
#pragma unroll
      for (int sl = 0; sl < 2; ++sl) {
        if (has[sl]) arrive(&sm.empty[(2 * pair + sl) % L::kStages]);
      }
      wgmma_wait_group<0>();  // P^T and alpha are rewritten for the next pair
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) fence_accumulators(o[mt]);
      trace(wg, 5);
    }
    n_block += static_cast<uint32_t>(n_blocks);
    if (wg == 0 && t == 0) grid_stamp(3);

      // Epilogue: the two warpgroups' sums per row, each row's LSE and factor (one thread a row),
      // then each thread's 8 dims of its 16 rows (columns of O^T).
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      l[e] += __shfl_xor_sync(0xffffffffu, l[e], 1);
      l[e] += __shfl_xor_sync(0xffffffffu, l[e], 2);
      if (q == 0) {
        sm.red_sum[chunk_parity][wg][row_a + 8 * e] = l[e];
        if (wg == 0) max_buf[row_a + 8 * e] = m[e];
      }
    }
    consumer_sync(kEpilogueBarrier);
    if (tid == 0) grid_stamp(6);
    const bool merged = c.slot == plan::kSlotCluster;  // left over the stages for the cluster
    const bool direct = c.slot == -1;
    if (tid < kRows) {
      const int row = tid;
      const int32_t r = row0 + row;
      const float total = sm.red_sum[chunk_parity][0][row] + sm.red_sum[chunk_parity][1][row];
      const bool any = total > 0.0f;
      const float lse =
          any ? (max_buf[row] * scale_log2 + log2f(total) - kPLog2) * kLn2 : -INFINITY;
      float scale = any ? 1.0f / total : 0.0f;
      if (r < p.rows) {
        if (direct && p.sinks != nullptr && any) scale /= 1.0f + expf(p.sinks[r % p.h_q] - lse);
        if (merged) {
          sm.merge_lse[row] = lse;
        } else if (!direct) {
          p.plan.partial_lse[int64_t{c.slot} * p.rows + r] = lse;
        } else if (p.lse != nullptr && r < p.out_view.live_rows(c.request, p.rows)) {
          // natural or base 2; var_q: no row past the request's q_len
          p.lse[p.out_view.lse_index(c.request, r, p.rows)] = lse * p.lse_scale;
        }
      }
      factor_buf[row] = scale * scales.v;
    }
    consumer_sync(kEpilogueBarrier);
    if (tid == 0) grid_stamp(7);
    // Rows written: all of the partial's (and the cluster's); of out, the request's (var_q: up to
    // its q_len).
    const int32_t live = direct ? min(p.rows, p.out_view.live_rows(c.request, p.rows)) : p.rows;
    const int dim0 = kColsPerWarpgroup * wg + 8 * group;
    // Each path in a loop of its own (with the three in one, the loop was not unrolled and O went
    // to local memory).
    const auto values = [&](int ci, float4& lo, float4& hi) {
      const float f = factor_buf[narrow_col(lane, ci)];
      const int i0 = 4 * (ci / 2) + ci % 2;  // row half 0 of the column; + 2 row half 1
      lo = make_float4(o[0][i0] * f, o[1][i0] * f, o[2][i0] * f, o[3][i0] * f);
      hi = make_float4(o[0][i0 + 2] * f, o[1][i0 + 2] * f, o[2][i0 + 2] * f, o[3][i0 + 2] * f);
    };
    if (merged) {
      // Both warpgroups are past their last P V and every copy has landed: the stages are free.
#pragma unroll
      for (int ci = 0; ci < 16; ++ci) {
        float4 lo, hi;
        values(ci, lo, hi);
        float* const x =
            reinterpret_cast<float*>(s.kv) + narrow_col(lane, ci) * kMergeStride + dim0;
        *reinterpret_cast<float4*>(x) = lo;
        *reinterpret_cast<float4*>(x + 4) = hi;
      }
    } else if (direct) {
#pragma unroll
      for (int ci = 0; ci < 16; ++ci) {
        float4 lo, hi;
        values(ci, lo, hi);
        const int32_t r = row0 + narrow_col(lane, ci);
        if (r < live) {
          TOut* const g = static_cast<TOut*>(p.out) + p.out_view.offset(c.request, r) + dim0;
          *reinterpret_cast<uint4*>(g) =
              make_uint4(pack2<TOut>(lo.x, lo.y), pack2<TOut>(lo.z, lo.w), pack2<TOut>(hi.x, hi.y),
                         pack2<TOut>(hi.z, hi.w));
        }
      }
    } else {
      // fp32 partials: each thread's 8 dims of a row as two 16-byte stores. (Threads G and G ^ 1
      // swapping halves first, so that each store instruction writes whole 32-byte sectors, made
      // the call 9-10 us slower at h_q 64 and 128, batch 1:
      // bench/results/2026-11-29-h200-fp8-instep, call 7.)
#pragma unroll
      for (int ci = 0; ci < 16; ++ci) {
        float4 lo, hi;
        values(ci, lo, hi);
        const int32_t r = row0 + narrow_col(lane, ci);
        if (r < live) {
          float* const g = p.plan.partial_out + (int64_t{c.slot} * p.rows + r) * kDv + dim0;
          *reinterpret_cast<float4*>(g) = lo;
          *reinterpret_cast<float4*>(g + 4) = hi;
        }
      }
    }
  }
  if (tid == 0) grid_stamp(4);
}

#endif  // MLAKIT_SM90_WGMMA

}  // namespace mlakit::sm90
