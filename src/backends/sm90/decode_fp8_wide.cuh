// The wide tile's consumers for an fp8 (e4m3) cache and an e4m3 q (config.h, Fp8WideLayout): 64
// query rows as wgmma's M, the two consumer warpgroups out of phase as in decode_kernel.cuh's
// consume (block n's scores by warpgroup n % 2, every block's P V by both, each for its 256 output
// dims), on fp8 wgmma:
//   own block:   S = Q K^T, 18 wgmma m64n64k32.e4m3 (A = Q, B = K, both K-major in the 64-byte
//                swizzle), the even and the odd column chunks into two accumulators (fp8 tensor
//                cores keep about 13 bits of a running sum: decode_fp8_narrow.cuh); mask; row max
//                (published to the other warpgroup); P = exp2(S - max) times 2^8 as e4m3 A
//                fragments in registers, also stored over the stage's rope chunk (thread t's 32
//                bytes at 32 t: the other warpgroup's thread t holds the same fragment positions).
//   every block: V^T of the warpgroup's 256 dims byte-transposed from the stage into its V^T tile
//                (8-bit B operands must be K-major), tokens in the k order of P's fragments
//                (wide_p_token), by the other warpgroup before it waits for P (by the owner while
//                its S ran was slower: 96 bytes of spills, h_q 128 b 64 L 4096 121 -> 153 us on an
//                H200); the warpgroup's barrier; O_w += P V_w, 2 wgmma m64n256k32.e4m3
//                (A = P from registers). The stage goes back once every consumer thread has read
//                it (empty, 256 arrivals).
// The epilogue is the 16-bit wide tile's (wide_epilogue.cuh) with the V scale and P's 2^8.
// kQSplit (Widen::kQSplit, Fp8QSplitLayout): a bf16 q on the same tile. The launch splits each row
// of q, times a power of two 2^k that puts its largest value in [128, 256), into two e4m3 parts,
// exactly for every value down to 2^-9 of the row's largest (pack_q.h, split_q); S = Q_lo K^T +
// Q_hi K^T (36 wgmmas, one accumulator pair, the residuals first), times 2^-k per row; P (times
// 2^8) in two e4m3 parts as well (to about 2^-8 of each value; the 16-bit tiles round P to bf16,
// 2^-9), the residual published through its own 4 KB, and O += P_hi V + P_lo V (4 wgmmas). fp8
// tensor cores at twice the 16-bit rate: the 16-bit tiles' tensor work without widening the
// cache. Error: the output as close to the reference as the widening tile's, the LSE within
// 1e-5 to 3e-5 (fp8 products; N(0, 1/4) data, docs/fp8-decode.md).
// Numbers (docs/fp8-decode.md; settled, page 64, h_q 128, b 64, L 4096): 125.8 us on an H200,
// 122.8 on an H100 (FlashMLA bf16 137.4, 137.1; vLLM's fp8 fork 120.6 on the H100).
#pragma once

#include <cuda/ptx>

#include "backends/sm90/config.h"
#include "backends/sm90/decode_fp8_narrow.cuh"
#include "backends/sm90/device.cuh"
#include "backends/sm90/params.h"
#include "backends/sm90/trace.cuh"
#include "backends/sm90/wgmma.cuh"
#include "backends/sm90/wide_epilogue.cuh"
#include "kernels/common/fp8.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/ptx.h"
#include "plan/work.cuh"

namespace mlakit::sm90 {

#ifdef MLAKIT_SM90_WGMMA

// The token of a block at k position `pos` of P's fragments (8-bit m64k32, wgmma.cuh): thread quad
// q holds positions 4q .. 4q + 3 (and 16 + those) of each 32, which the S accumulator gives it as
// tokens 2q, 2q + 1, 8 + 2q, 9 + 2q; odd quads take each pair the other way round, so that one
// load instruction of the V^T transposes reads tokens of both parities (every bank).
__device__ __forceinline__ int wide_p_token(int pos) {
  const int q = (pos >> 2) & 3, j = pos & 3;
  return (pos & ~15) + 8 * (j >> 1) + 2 * q + ((j & 1) ^ (q & 1));
}

// O *= alpha, only where a row's max moved (decode_kernel.cuh's rescale).
__device__ __forceinline__ void rescale_fp8(float (&o)[128], const MaxStep (&step)[2]) {
  if (__any_sync(0xffffffffu, step[0].alpha != 1.0f || step[1].alpha != 1.0f)) {
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] *= step[(i / 2) % 2].alpha;
  }
}

// This warpgroup's 256 dims of the stage's V, transposed into its V^T tile: dim row d (64 bytes,
// the 64-byte swizzle) holds the block's tokens in P's k order. Thread t takes two units of 16
// dims x 4 positions: 4 loads of 16 bytes, 4 byte transposes, 16 stores of 4 bytes. Tokens at or
// past `valid` are zeros (past the length the pages hold anything; 0 x NaN is NaN).
__device__ __forceinline__ void transpose_v(const uint8_t* kv_stage, uint8_t* vt, int wg, int t,
                                            int32_t valid) {
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int unit = t + 128 * k;
    const int pg = unit % 16, a = unit / 16;  // positions 4 pg .. 4 pg + 3, dims 16 a ..
    const int dim0 = kColsPerWarpgroup * wg + 16 * a;
    const uint8_t* v_chunk = kv_stage + (dim0 / 64) * Fp8WideLayout::kKvChunkBytes;
    const int u = (dim0 % 64) / 16;
    uint4 x[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int tok = wide_p_token(4 * pg + j);
      x[j] = load_v16(v_chunk, u, tok);
      if (tok >= valid) x[j] = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t rows[4] = {word(x[0], w), word(x[1], w), word(x[2], w), word(x[3], w)};
      uint32_t dims[4];
      fp8::transpose4x4(rows, dims);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int d = 16 * a + 4 * w + i;
        *reinterpret_cast<uint32_t*>(vt + d * 64 + ((((pg >> 2) ^ (d >> 1)) & 3) << 4) +
                                     (pg & 3) * 4) = dims[i];
      }
    }
  }
}

template <typename TOut, bool kQSplit = false>
__device__ __forceinline__ void consume_fp8_wide(const DecodeParams& p, const Smem& s, int m_tile,
                                                 int32_t cta) {
  using L = std::conditional_t<kQSplit, Fp8QSplitLayout, Fp8WideLayout>;
  const int tid = static_cast<int>(threadIdx.x);
  // Through a shuffle so the compiler knows it is the same across the warp.
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int t = tid % 128;
  const int lane = t % 32, q = lane % 4;
  const int row_a = (t / 32) * 16 + lane / 4;  // the thread's rows: row_a and row_a + 8
  SmallStorage& sm = *s.small;
  const uint64_t q_desc = smem_desc_sw64(ptx::smem_u32(s.q), 512);
  uint8_t* const vt = s.kv + L::kStages * L::kStageBytes + wg * L::kVtBytes;
  const uint64_t vt_desc = smem_desc_sw64(ptx::smem_u32(vt), 512);
  const int32_t row0 = m_tile * kRows;
  const fp8::Scales scales = fp8::read_scales(p);
  const float scale_log2 = p.scale_log2 * scales.qk;
  // Two e4m3 pairs (16-bit halves) into one fragment register: odd quads swap each pair
  // (wide_p_token).
  const uint32_t pack_sel = (q & 1) ? 0x4501u : 0x5410u;
  WarpgroupSync wg_sync{.bar = &sm.wg_sync[wg]};

  plan::ChunkIterator chunks(p.plan, p.schedule, cta, p.batch, &sm.part, p.seq_lens, p.max_len);
  chunks.skip_dead_tiles(p.out_view, row0);  // var_q
  plan::Chunk c;
  uint32_t n_chunk = 0, n_block = 0;
  while (chunks.next(&c)) {
    // Tokens each of the two rows sees: the chunk's, and with causal MTP fewer for early tokens.
    const int32_t limit[2] = {visible_limit(p, c, row0 + row_a),
                              visible_limit(p, c, row0 + row_a + 8)};
    // kQSplit: the rows' 2^-k. Rows past the request's (a partial last tile) take 1: TMA reads
    // the next request's packed rows there (zeros past the last), and their results are never
    // written.
    float row_scale[2] = {1.0f, 1.0f};
    if constexpr (kQSplit) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int32_t r = row0 + row_a + 8 * e;
        if (r < p.rows) row_scale[e] = p.q_row_scale[int64_t{c.request} * p.rows + r];
      }
    }
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
      const uint32_t stage = n_block % L::kStages, phase = (n_block / L::kStages) & 1;
      uint8_t* const kv_stage = s.kv + stage * L::kStageBytes;
      uint8_t* const p_share = kv_stage + kPChunk * L::kKvChunkBytes;  // over the rope chunk
      const int32_t valid = c.token_end - tok0;
      const bool own = (n_block % 2) == static_cast<uint32_t>(wg);
      MaxStep step[2];
      uint32_t pa[2][4];                   // P as the A fragments of the two k-steps
      [[maybe_unused]] uint32_t pb[2][4];  // kQSplit: P's residual, alike
      if (own) {
        const uint64_t k_desc = smem_desc_sw64(ptx::smem_u32(kv_stage), 512);
        float sc[2][32];
#pragma unroll
        for (int j = 0; j < kQkChunks; ++j) {
          wait_parity(&sm.full[stage][j], phase);
          if (j == 0 && n_block == 0 && t == 0) grid_stamp(2);
          if (j == 0) trace(wg, 1);
          if (j == kQkChunks - 1) trace(wg, 2);
          wgmma_fence();  // after each wait, or ptxas serializes the wgmmas (C7520)
          // kQSplit: q's residuals (chunks 9.. of the Q tile) first, the high parts after all of
          // them: fp8 tensor cores keep about 13 bits of a running sum, so the small products go
          // in while the sums are small.
          const int q_chunk = kQSplit ? kQkChunks + j : j;
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            wgmma_m64n64k32_e4m3(
                sc[j % 2], desc_advance(q_desc, q_chunk * L::kQChunkBytes + kk * 32),
                desc_advance(k_desc, j * L::kKvChunkBytes + kk * 32), (j >= 2 || kk != 0) ? 1 : 0);
          }
        }
        if constexpr (kQSplit) {
          wgmma_fence();
#pragma unroll
          for (int j = 0; j < kQkChunks; ++j) {
#pragma unroll
            for (int kk = 0; kk < 2; ++kk) {
              wgmma_m64n64k32_e4m3(sc[j % 2], desc_advance(q_desc, j * L::kQChunkBytes + kk * 32),
                                   desc_advance(k_desc, j * L::kKvChunkBytes + kk * 32), 1);
            }
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
        if constexpr (kQSplit) {
#pragma unroll
          for (int i = 0; i < 32; ++i) sc[0][i] *= row_scale[(i / 2) % 2];
        }

        // Mask (past the limits, and tokens of bad pages), row max (the four lanes of a row), new
        // max from the one before.
        const uint64_t bad =
            ptx::ld_shared_u64_here(ptx::smem_u32(&sm.bad_tokens[stage]));  // page_mask.cuh
        if (tok0 + kBlockN > min(limit[0], limit[1]) || bad != 0) {
          const int32_t j_base = 2 * q;
#pragma unroll
          for (int i = 0; i < 32; ++i) {
            const int32_t j = j_base + 8 * (i / 4) + (i % 2);
            if (tok0 + j >= limit[(i / 2) % 2] || plan::bad_token(bad, j)) sc[0][i] = -INFINITY;
          }
        }
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int i = 0; i < 32; ++i) mx[(i / 2) % 2] = fmaxf(mx[(i / 2) % 2], sc[0][i]);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 1));
          mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 2));
          if (lane % 4 == 0) sm.row_max[wg][row_a + 8 * e] = mx[e];
          step[e] = max_step(m[e], mx[e], scale_log2);
        }
        // P times 2^8 as e4m3: fragment kk, register 2h + e holds row half e, tokens 16h .. of
        // the k-step: values 16 kk + 8 h + 2e (+1) and + 4 (+5).
        float sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const int e = (i / 2) % 2;
          sc[0][i] = ptx::ex2_approx_ftz_f32(sc[0][i] * scale_log2 - (step[e].scaled - kFp8PLog2));
          sum[e] += sc[0][i];
        }
        const float(&pv)[32] = sc[0];
        // kQSplit: also P's residual, P minus its e4m3 part widened back exactly, in e4m3.
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int i = 16 * kk + 8 * h + 2 * e;
              const uint16_t n0 = fp8::narrow2(pv[i], pv[i + 1]);
              const uint16_t n1 = fp8::narrow2(pv[i + 4], pv[i + 5]);
              pa[kk][2 * h + e] = fp8::prmt(n0, n1, pack_sel);
              if constexpr (kQSplit) {
                const float2 h0 = fp8::widen2_f32(n0), h1 = fp8::widen2_f32(n1);
                pb[kk][2 * h + e] =
                    fp8::prmt(fp8::narrow2(pv[i] - h0.x, pv[i + 1] - h0.y),
                              fp8::narrow2(pv[i + 4] - h1.x, pv[i + 5] - h1.y), pack_sel);
              }
            }
          }
        }
        if constexpr (kQSplit) {
          // One buffer serves both warpgroups: thread t writes its slot for block n + 1 only
          // after it has read the other warpgroup's block n from it.
          uint8_t* const p_low = s.q + (L::kPLowOffset - L::kQOffset);
          *reinterpret_cast<uint4*>(p_low + 32 * t) =
              make_uint4(pb[0][0], pb[0][1], pb[0][2], pb[0][3]);
          *reinterpret_cast<uint4*>(p_low + 32 * t + 16) =
              make_uint4(pb[1][0], pb[1][1], pb[1][2], pb[1][3]);
        }
#pragma unroll
        for (int e = 0; e < 2; ++e) l[e] = l[e] * step[e].alpha + sum[e];
        *reinterpret_cast<uint4*>(p_share + 32 * t) =
            make_uint4(pa[0][0], pa[0][1], pa[0][2], pa[0][3]);
        *reinterpret_cast<uint4*>(p_share + 32 * t + 16) =
            make_uint4(pa[1][0], pa[1][1], pa[1][2], pa[1][3]);
        arrive(&sm.published[wg]);  // every thread: its own stores (and reads) ordered
        trace(wg, 4);
      }
      // This warpgroup's V^T, once the block's V chunks have landed (the other warpgroup's
      // block: before it waits for P).
#pragma unroll
      for (int j = 0; j < kVChunksPerWarpgroup; ++j) {
        wait_parity(&sm.full[stage][wg * kVChunksPerWarpgroup + j], phase);
      }
      if (!own) trace(wg, 6);
      transpose_v(kv_stage, vt, wg, t, valid);
      cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // V^T, for wgmma
      if (!own) {
        wait_parity(&sm.published[wg ^ 1], (n_block / 2) & 1);
        trace(wg, 7);
        const uint4 p0 = *reinterpret_cast<const uint4*>(p_share + 32 * t);
        const uint4 p1 = *reinterpret_cast<const uint4*>(p_share + 32 * t + 16);
        pa[0][0] = p0.x, pa[0][1] = p0.y, pa[0][2] = p0.z, pa[0][3] = p0.w;
        pa[1][0] = p1.x, pa[1][1] = p1.y, pa[1][2] = p1.z, pa[1][3] = p1.w;
        if constexpr (kQSplit) {
          const uint8_t* const p_low = s.q + (L::kPLowOffset - L::kQOffset);
          const uint4 b0 = *reinterpret_cast<const uint4*>(p_low + 32 * t);
          const uint4 b1 = *reinterpret_cast<const uint4*>(p_low + 32 * t + 16);
          pb[0][0] = b0.x, pb[0][1] = b0.y, pb[0][2] = b0.z, pb[0][3] = b0.w;
          pb[1][0] = b1.x, pb[1][1] = b1.y, pb[1][2] = b1.z, pb[1][3] = b1.w;
        }
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          step[e] = max_step(m[e], sm.row_max[wg ^ 1][row_a + 8 * e], scale_log2);
          l[e] *= step[e].alpha;
        }
      }
      arrive(&sm.empty[stage]);  // this thread's reads of the stage are done
      wg_sync.sync();            // the warpgroup's V^T is complete
      rescale_fp8(o, step);
      if constexpr (kQSplit) {
        // The block's P V into a fresh accumulator, half the columns at a time, added to O in
        // fp32: fp8 tensor cores keep about 13 bits of a running sum, and O summed over a
        // chunk's blocks on them lost precision with the chunk's length (rel. L2 4e-3 at 128
        // blocks, 1.2e-3 at one; H200, bench/results/2026-11-29-h200-fp8-qsplit).
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float part[64];
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            wgmma_m64n128k32_e4m3_rs(part, pa[kk], desc_advance(vt_desc, h * 128 * 64 + kk * 32),
                                     kk);
          }
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            wgmma_m64n128k32_e4m3_rs(part, pb[kk], desc_advance(vt_desc, h * 128 * 64 + kk * 32),
                                     1);
          }
          wgmma_commit_group();
          wgmma_wait_group<0>();  // V^T is rewritten for the next block
          fence_accumulators(part);
#pragma unroll
          for (int i = 0; i < 64; ++i) o[64 * h + i] += part[i];
        }
      } else {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          wgmma_m64n256k32_e4m3_rs(o, pa[kk], desc_advance(vt_desc, kk * 32), 1);
        }
        wgmma_commit_group();
        wgmma_wait_group<0>();  // V^T is rewritten for the next block
        fence_accumulators(o);
      }
      trace(wg, 5);
    }
    if (wg == 0 && t == 0) grid_stamp(3);
    write_wide_chunk<TOut>(p, s, c, row0, m, l, o, scale_log2, kFp8PLog2, scales.v, chunk_parity);
  }
  if (tid == 0) grid_stamp(4);
}

#endif  // MLAKIT_SM90_WGMMA

}  // namespace mlakit::sm90
