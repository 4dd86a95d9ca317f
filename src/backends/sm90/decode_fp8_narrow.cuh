// The narrow tile's consumers for an fp8 (e4m3, one scale) cache (config.h, Fp8Layout): up to 32
// query rows as wgmma's N; warpgroup w takes the blocks of stages w and w + 2 alone (the producer
// is the 16-bit tiles'). Per block, by q's type:
//   S^T = K Q^T     e4m3 q: 18 wgmma m64nNk32.e4m3 (A = K, B = Q, both K-major in the 64-byte
//                   swizzle); 16-bit q: 36 wgmma m64nNk16 (A = K widened from e4m3 in registers,
//                   kernels/common/fp8.cuh; B = Q as the 16-bit narrow tile holds it)
//   mask; column max (as decode_narrow.cuh)
//   P^T             exp2(S^T - max) into the warpgroup's P^T tile: e4m3, times 2^8 (e4m3 keeps
//                   values from 2^-9 on, so P from 2^-17 on survives; the sums carry the factor
//                   too and the LSE takes it off), or 16-bit
//   V^T             A of O^T from registers, the cached bytes loaded once: each thread loads the
//                   16 bytes of 16 output dims for each token its fragments need and byte-
//                   transposes them (e4m3: 4 tokens of one dim per register) or pairs and widens
//                   them (16-bit: 2 tokens per register). The output dims are permuted: thread row
//                   group G = 8 warp + lane / 4 holds dims 16G .. 16G + 15, value (tile mt, row
//                   half e) being dim 16G + 8e + mt; the epilogue puts them back. The stage goes
//                   back (every thread of the warpgroup arrives on empty) once its V is loaded,
//                   which is once a wgmma reading the fragments has issued (given back when the
//                   loads had only issued, the split's outputs went wrong at times: most likely
//                   the next block's copy rewrote the stage first).
//   O^T += V^T P^T  8 tiles of 64 output dims: e4m3 2 x 8 m64nNk32, 16-bit 4 x 8 m64nNk16.
// The epilogue is decode_narrow.cuh's but for the permuted dims and the e4m3 P's factor.
// kQSplit (Widen::kQSplit, a bf16 q, 16 rows; Fp8Layout<16, 2, true>): both products on fp8 wgmma
// as for an e4m3 q, q split into two e4m3 parts by the consumers as each chunk's Q lands
// (split_q_tile, the split of pack_q.h's split_q): S^T = K Q_lo^T + K Q_hi^T (4 wgmmas a column
// chunk into a fresh accumulator, the residuals first), each column times its row's 2^-k; P^T in
// two e4m3 parts (the residual in the second half of the 16-bit P^T tile); each block's
// O^T += V^T P_lo^T + V^T P_hi^T into fresh accumulators (groups of two output-dim tiles), added to
// O^T in fp32. The error of a 16-bit q (docs/fp8-decode.md).
// Numbers (docs/fp8-decode.md; settled, page 64, b 64, L 4096, h_q 16): e4m3 q 49.2 us on an H200,
// 65.0 on an H100 (FlashMLA bf16 85.8, 115.0); bf16 q 80.2 and 83.0 widening the cache, 55.4 on an
// H200 split (tactic 18).
#pragma once

#include <cuda/ptx>
#include <type_traits>
#include <utility>

#include "backends/sm90/config.h"
#include "backends/sm90/decode_narrow.cuh"
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

// log2 of the factor an e4m3 P carries.
inline constexpr float kFp8PLog2 = 8.0f;

// Byte offset of byte `col` (0..63) of row `row` in a tile of 64-byte rows in the 64-byte swizzle.
__device__ __forceinline__ uint32_t swizzled64(int row, int col) {
  return row * 64 + ((((col >> 4) ^ (row >> 1)) & 3) << 4) + (col & 15);
}

// Where token `tok` of a block sits among the k positions of an e4m3 P^T tile: thread quad q of
// the V^T loads takes token 4q + ((j + q) & 3) of each 16 as its position 4q + j, so that one
// load instruction of a warp reads tokens of both parities and all four swizzle phases (every
// bank, 4 wavefronts for 512 bytes instead of 8).
__device__ __forceinline__ int fp8_p_position(int tok) {
  return (tok & ~3) | ((tok - (tok >> 2)) & 3);
}

// The 16 bytes (16 output dims 16G .. 16G + 15) of token `tok` in a stage: column chunk G / 4,
// 16-byte unit G % 4 of the token's 64-byte row, swizzled.
__device__ __forceinline__ uint4 load_v16(const uint8_t* v_chunk, int u, int tok) {
  return *reinterpret_cast<const uint4*>(v_chunk + tok * 64 + ((u ^ ((tok >> 1) & 3)) << 4));
}

__device__ __forceinline__ uint32_t word(const uint4& v, int k) {
  return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

// The A fragments of S^T = K Q^T for the 4 k-steps of one column chunk (16-bit q): K at the
// thread's tokens tok_a and tok_a + 8 (rows), dims 16 kk + 2q, + 1 and + 8, + 9, widened to T.
template <typename T>
__device__ __forceinline__ void load_k_fragments(const uint8_t* k_chunk, int tok_a, int q,
                                                 uint32_t (&a)[4][4]) {
  const uint8_t* row = k_chunk + tok_a * 64 + 2 * q;
  const int phase = (tok_a >> 1) & 3;  // the same for tok_a + 8
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint8_t* at = row + ((kk ^ phase) << 4);
    const uint32_t v0 = *reinterpret_cast<const uint16_t*>(at);
    const uint32_t v1 = *reinterpret_cast<const uint16_t*>(at + 8 * 64);
    const uint32_t v2 = *reinterpret_cast<const uint16_t*>(at + 8);
    const uint32_t v3 = *reinterpret_cast<const uint16_t*>(at + 8 * 64 + 8);
    a[kk][0] = fp8::widen_low_pair<T>(v0);
    a[kk][1] = fp8::widen_low_pair<T>(v1);
    a[kk][2] = fp8::widen_low_pair<T>(v2);
    a[kk][3] = fp8::widen_low_pair<T>(v3);
  }
}

// The chunk's rows from O^T with the permuted output dims (thread row group G = 8 warp + lane / 4
// holds dims 16G .. 16G + 15, value (tile mt, row half e) being dim 16G + 8e + mt), kPassRows (8
// or 16) rows at a time: warpgroup 0 stores its share into rows_buf (fp32, kMergeStride apart),
// warpgroup 1 adds its own, then all write them out (or, merged, all rows at once: they stay over
// the stages, both warpgroups being past their last P V and every copy landed). o times factor
// per column.
template <typename TOut, int kN, int kPassRows = kNarrowPassRows>
__device__ __forceinline__ void write_permuted_rows(const DecodeParams& p, const plan::Chunk& c,
                                                    float* rows_buf, bool merged, int32_t row0,
                                                    int wg, int lane, int group,
                                                    const float (&o)[kDv / 64][kN / 2],
                                                    const float (&factor)[kN / 4]) {
  const auto col_of = [lane](int ci) { return narrow_col(lane, ci); };
  // (pass as a constant: with a loop the compiler left o in local memory.)
  static_assert(kPassRows == 8 || kPassRows == kNarrowPassRows);
  constexpr int kPassCols = kPassRows / 4;  // a pass's columns among the thread's (narrow_col)
  const auto pass = [&](auto pass_constant) {
    constexpr int kPass = decltype(pass_constant)::value;
    const int row_off = merged ? 0 : kPass * kPassRows;
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      if (wg == w) {
#pragma unroll
        for (int ci = kPassCols * kPass; ci < kPassCols * (kPass + 1); ++ci) {
          float* x = rows_buf + (col_of(ci) - row_off) * kMergeStride + 16 * group;
          const int i0 = 4 * (ci / 2) + ci % 2;  // value of the column, row half 0
#pragma unroll
          for (int v = 0; v < 4; ++v) {  // dims 16G + 4v .. + 3: row half v / 2, tiles 4 (v % 2) ..
            const int i = i0 + 2 * (v / 2);
            const int mt0 = 4 * (v % 2);
            float4 val = make_float4(o[mt0][i] * factor[ci], o[mt0 + 1][i] * factor[ci],
                                     o[mt0 + 2][i] * factor[ci], o[mt0 + 3][i] * factor[ci]);
            float4* dst = reinterpret_cast<float4*>(x + 4 * v);
            if (w == 1) {
              const float4 old = *dst;
              val.x += old.x;
              val.y += old.y;
              val.z += old.z;
              val.w += old.w;
            }
            *dst = val;
          }
        }
      }
      consumer_sync(kEpilogueBarrier);
    }
    if (merged) return;
    narrow_store_rows<TOut, kPassRows>(p, c, rows_buf, row0, row_off);
  };
  static_assert(kN == kPassRows || kN == 2 * kPassRows || kN == 4 * kPassRows);
  pass(std::integral_constant<int, 0>{});
  if constexpr (kN > kPassRows) pass(std::integral_constant<int, 1>{});
  if constexpr (kN > 2 * kPassRows) {
    pass(std::integral_constant<int, 2>{});
    pass(std::integral_constant<int, 3>{});
  }
}

// kQSplit: the chunk's bf16 Q tile (as TMA wrote it, the 128-byte swizzle) split by all 256
// consumer threads into its two e4m3 parts (fp8::split2, as pack_q.h's split_q): the high parts'
// 9 column chunks, then the residuals', in the 64-byte swizzle, and each row's 2^-k into
// sm.q_row_scale. 256 / kN threads a row, each a pair of values at a time (consecutive threads on
// consecutive pairs). Ends with the consumers' barrier, the split visible to wgmma.
template <typename L, int kN>
__device__ __forceinline__ void split_q_tile(const Smem& s) {
  constexpr int kThreadsPerRow = kConsumerThreads / kN;
  constexpr int kPairs = kDqk / 2 / kThreadsPerRow;  // a thread's pairs of its row
  static_assert(kDqk / 2 % kThreadsPerRow == 0);
  const int tid = static_cast<int>(threadIdx.x);
  const int r = tid / kThreadsPerRow, i = tid % kThreadsPerRow;
  uint32_t x[kPairs];
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kPairs; ++k) {
    const int pair = i + kThreadsPerRow * k;  // values 2 pair, 2 pair + 1
    const int j = pair / 32;                  // their column chunk
    x[k] = *reinterpret_cast<const uint32_t*>(s.q + j * L::kQChunkBytes +
                                              swizzled(r, (pair % 32) * 4));
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x[k]));
    amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
  }
#pragma unroll
  for (int o = kThreadsPerRow / 2; o > 0; o >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  }
  const int e = fp8::split_exponent(amax);
  const float up = ldexpf(1.0f, 8 - e);
  uint8_t* const split = s.q + (L::kSplitQOffset - L::kQOffset);
#pragma unroll
  for (int k = 0; k < kPairs; ++k) {
    const int pair = i + kThreadsPerRow * k;
    const int j = pair / 32;
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x[k]));
    uint16_t hi, lo;
    fp8::split2(f.x * up, f.y * up, hi, lo);
    const uint32_t at = swizzled64(r, (2 * pair) % 64);
    *reinterpret_cast<uint16_t*>(split + j * L::kSplitQChunkBytes + at) = hi;
    *reinterpret_cast<uint16_t*>(split + (kQkChunks + j) * L::kSplitQChunkBytes + at) = lo;
  }
  if (i == 0) s.small->q_row_scale[r] = ldexpf(1.0f, e - 8);
  cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // the split, for wgmma
  consumer_sync(kEpilogueBarrier);
}

template <typename TQ, typename TOut, int kN, bool kQSplit = false>
__device__ __forceinline__ void consume_fp8_narrow(const DecodeParams& p, const Smem& s, int m_tile,
                                                   int32_t cta) {
  static_assert(kN == kNarrowPassRows || kN == 2 * kNarrowPassRows, "16 or 32 rows");
  constexpr bool kFp8Q = std::is_same_v<TQ, uint8_t>;
  // Both products on fp8 wgmma: an e4m3 q, or a bf16 q split into two e4m3 parts (P too).
  constexpr bool kFp8Ops = kFp8Q || kQSplit;
  static_assert(!kQSplit || std::is_same_v<TQ, __nv_bfloat16>);
  using L = Fp8Layout<kN, sizeof(TQ), kQSplit>;
  constexpr int kVals = kN / 2;      // accumulator values per thread of one m64nN product
  constexpr int kCols = kN / 4;      // the distinct columns (query rows) among them
  constexpr int kMTiles = kDv / 64;  // O^T: 8 products of 64 output dims
  const int tid = static_cast<int>(threadIdx.x);
  // Through a shuffle so the compiler knows it is the same across the warp.
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int t = tid % 128;
  const int lane = t % 32, warp = t / 32, q = lane % 4;
  // The thread's tokens of a block (rows of S^T): tok_a and tok_a + 8; its columns: value i is
  // column col(ci(i)) (wgmma.cuh); its output dims: 16 G .. 16 G + 15.
  const int tok_a = 16 * warp + lane / 4;
  const int group = 8 * warp + lane / 4;
  const auto ci_of = narrow_ci;
  const auto col_of = [lane](int ci) { return narrow_col(lane, ci); };
  SmallStorage& sm = *s.small;
  const uint32_t q_addr = ptx::smem_u32(s.q);
  const int32_t row0 = m_tile * kN;
  const fp8::Scales scales = fp8::read_scales(p);
  const float scale_log2 = p.scale_log2 * scales.qk;
  // This warpgroup's P^T over the exchange buffer, which holds rows only after both warpgroups are
  // past their blocks.
  uint8_t* const p_tile = reinterpret_cast<uint8_t*>(s.exchange) + wg * L::kPBytes;
  const uint32_t p_addr = ptx::smem_u32(p_tile);
  // kQSplit: P's e4m3 residual after its high part, in the second half of the 16-bit P^T tile.
  [[maybe_unused]] uint8_t* const p_low_tile = p_tile + kN * kBlockN;
  [[maybe_unused]] const uint32_t split_q_addr =
      ptx::smem_u32(s.q + (L::kSplitQOffset - L::kQOffset));
  // 16-bit P V: the pairing permutes of the thread's tokens (loaded in the order of fp8_p_position
  // spreads the banks as there: the odd quads load token 2q + 1 first).
  const uint32_t pair_sel = (q & 1) ? 0x0040u : 0x4000u;

  plan::ChunkIterator chunks(p.plan, p.schedule, cta, p.batch, &sm.part, p.seq_lens, p.max_len);
  chunks.skip_dead_tiles(p.out_view, row0);  // var_q
  plan::Chunk c;
  uint32_t n_chunk = 0, n_block = 0;
  WarpgroupSync wg_sync{.bar = &sm.wg_sync[wg]};
  while (chunks.next(&c)) {
    int32_t limit[kCols], min_limit;
    float m[kCols], l[kCols], o[kMTiles][kVals];
    const auto on_q = [&s] {
      if constexpr (kQSplit) split_q_tile<L, kN>(s);
    };
    const OwnBlocks share = start_narrow_chunk<kN>(p, c, sm, row0, lane, wg, n_block, n_chunk,
                                                   limit, min_limit, m, l, o, on_q);
    const int32_t n_blocks = share.n, first_own = share.first, last_own = share.last;
    // kQSplit: the columns' 2^-k (rows past the request's: whatever their boxes held; never
    // written).
    [[maybe_unused]] float row_scale[kCols];
    if constexpr (kQSplit) {
#pragma unroll
      for (int ci = 0; ci < kCols; ++ci) row_scale[ci] = sm.q_row_scale[col_of(ci)];
    }

#pragma unroll 1
    for (int32_t b = first_own; b < n_blocks; b += 2) {
      const uint32_t nb = n_block + static_cast<uint32_t>(b);
      const uint32_t stage = nb % L::kStages, phase = (nb / L::kStages) & 1;
      const int32_t tok0 = c.token_begin + b * kBlockN;
      const int32_t valid = c.token_end - tok0;
      const uint8_t* kv_stage = s.kv + stage * L::kStageBytes;
      trace(wg, 0);

      // S^T = K Q^T, chunk by chunk as the copies land.
      float st[kVals];
      if constexpr (kFp8Ops) {
        // Each column chunk (64 dims) into a fresh accumulator, added to st in fp32: the fp8
        // tensor cores keep about 13 bits of a running sum (DeepSeek-V3's report), so 576 terms
        // in one accumulator left LSE errors of 2-7e-3 (H200, N(0, 1) data); two accumulators
        // alternate so that chunk j + 1's products run while chunk j's are added. kQSplit: the
        // residuals' products first (small sums first), then the high parts'; the columns times
        // their 2^-k after the sum.
        constexpr int kQParts = kQSplit ? 2 : 1;
        const uint64_t k_desc = smem_desc_sw64(ptx::smem_u32(kv_stage), 512);
        const uint64_t q_desc = smem_desc_sw64(kQSplit ? split_q_addr : q_addr, 512);
        constexpr int kQChunkBytes = kQSplit ? L::kSplitQChunkBytes : L::kQChunkBytes;
        float part[2][kVals];
        const auto add_part = [&](const float(&x)[kVals], bool first) {
#pragma unroll
          for (int i = 0; i < kVals; ++i) st[i] = first ? x[i] : st[i] + x[i];
        };
#pragma unroll
        for (int j = 0; j < kQkChunks; ++j) {
          wait_parity(&sm.full[stage][j], phase);
          if (j == 0 && nb == 0 && t == 0) grid_stamp(2);
          if (j == 0) trace(wg, 1);
          if (j == kQkChunks - 1) trace(wg, 2);
          wgmma_fence();  // after each wait, or ptxas serializes the wgmmas (C7520)
#pragma unroll
          for (int h = 0; h < kQParts; ++h) {
            const int q_chunk = kQSplit && h == 0 ? kQkChunks + j : j;
#pragma unroll
            for (int kk = 0; kk < 2; ++kk) {
              wgmma_m64nNk32_e4m3<kN>(
                  part[j % 2], desc_advance(k_desc, j * L::kKvChunkBytes + kk * 32),
                  desc_advance(q_desc, q_chunk * kQChunkBytes + kk * 32), (h | kk) != 0 ? 1 : 0);
            }
          }
          wgmma_commit_group();
          if (j >= 1) {
            wgmma_wait_group<1>();
            fence_accumulators(part[(j - 1) % 2]);
            add_part(part[(j - 1) % 2], j == 1);
          }
        }
        wgmma_wait_group<0>();
        fence_accumulators(part[(kQkChunks - 1) % 2]);
        add_part(part[(kQkChunks - 1) % 2], false);
        if constexpr (kQSplit) {
#pragma unroll
          for (int i = 0; i < kVals; ++i) st[i] *= row_scale[ci_of(i)];
        }
      } else {
        const uint64_t q_desc = smem_desc_sw128(q_addr, 0, 1024);
        uint32_t a[2][4][4];  // two chunks' fragments: one widened while the other's run
#pragma unroll
        for (int j = 0; j < kQkChunks; ++j) {
          wait_parity(&sm.full[stage][j], phase);
          if (j == 0 && nb == 0 && t == 0) grid_stamp(2);
          if (j == 0) trace(wg, 1);
          if (j == kQkChunks - 1) trace(wg, 2);
          if (j >= 2) wgmma_wait_group<1>();  // chunk j - 2, whose registers these are, is done
          load_k_fragments<TQ>(kv_stage + j * L::kKvChunkBytes, tok_a, q, a[j % 2]);
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            wgmma_m64nNk16_rs<TQ, kN>(st, a[j % 2][kk],
                                      desc_advance(q_desc, j * L::kQChunkBytes + kk * 32),
                                      (j | kk) != 0 ? 1 : 0);
          }
          wgmma_commit_group();
        }
        wgmma_wait_group<0>();
      }
      fence_accumulators(st);
      trace(wg, 3);
      if (b == last_own && t == 0) arrive(&sm.q_empty);

      // Mask, column max of the block, the steps of the running maxima.
      MaxStep step[kCols];
      const uint64_t bad =
          ptx::ld_shared_u64_here(ptx::smem_u32(&sm.bad_tokens[stage]));  // page_mask.cuh
      const bool moved = narrow_column_steps<kN>(st, limit, min_limit, bad, tok0, tok_a, wg, sm,
                                                 wg_sync, scale_log2, m, step);

      // P^T (row = query row, 64 tokens), the sums.
      float sum[kCols];
#pragma unroll
      for (int ci = 0; ci < kCols; ++ci) sum[ci] = 0.0f;
#pragma unroll
      for (int i = 0; i < kVals; i += 4) {
        // Values i .. i + 3: columns ci_of(i), ci_of(i + 1) at tokens tok_a and tok_a + 8.
#pragma unroll
        for (int k = i; k < i + 2; ++k) {
          const int ci = ci_of(k);
          const float bias = step[ci].scaled - (kFp8Ops ? kFp8PLog2 : 0.0f);
          const float p0 = ptx::ex2_approx_ftz_f32(st[k] * scale_log2 - bias);
          const float p1 = ptx::ex2_approx_ftz_f32(st[k + 2] * scale_log2 - bias);
          sum[ci] += p0 + p1;
          const int col = col_of(ci);
          if constexpr (kFp8Ops) {
            const uint16_t pair = fp8::narrow2(p0, p1);
            const uint32_t at0 = swizzled64(col, fp8_p_position(tok_a));
            const uint32_t at1 = swizzled64(col, fp8_p_position(tok_a + 8));
            p_tile[at0] = static_cast<uint8_t>(pair);
            p_tile[at1] = static_cast<uint8_t>(pair >> 8);
            if constexpr (kQSplit) {
              // P's residual: P minus its e4m3 part widened back exactly, in e4m3.
              const float2 h = fp8::widen2_f32(pair);
              const uint16_t low = fp8::narrow2(p0 - h.x, p1 - h.y);
              p_low_tile[at0] = static_cast<uint8_t>(low);
              p_low_tile[at1] = static_cast<uint8_t>(low >> 8);
            }
          } else {
            *reinterpret_cast<uint16_t*>(p_tile + swizzled(col, 2 * tok_a)) = bits16<TQ>(p0);
            *reinterpret_cast<uint16_t*>(p_tile + swizzled(col, 2 * (tok_a + 8))) = bits16<TQ>(p1);
          }
        }
      }
#pragma unroll
      for (int ci = 0; ci < kCols; ++ci) l[ci] = l[ci] * step[ci].alpha + sum[ci];
      cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // P^T, for wgmma
      wg_sync.sync();  // (also: every thread has read col_max)
      trace(wg, 4);

      // O^T *= alpha (only where some column's max moved).
      if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int i = 0; i < kVals; ++i) o[mt][i] *= step[ci_of(i)].alpha;
        }
      }

      // O^T += V^T P^T, V^T from registers.
      const uint8_t* v_chunk = kv_stage + (group / 4) * L::kKvChunkBytes;
      const int u = group % 4;
      const bool tail = valid < kBlockN;  // rows past the length: zeros (0 x NaN is NaN)
      // The A fragments of one k-step are 32 registers; with 16 rows two k-steps' fit beside O^T
      // (one is widened while the other's wgmmas run), with 32 rows one (O^T is 128 registers;
      // two spilled 96 bytes): the loads of the next k-step go out before the wait for the last.
      constexpr int kABuffers = kN == kNarrowPassRows ? 2 : 1;
      uint32_t a[kABuffers][kMTiles][4];
      if constexpr (kQSplit) {
        static_assert(kABuffers == 2, "both k-steps' V^T fragments at once");
        // V^T of both k-steps into registers (as for an e4m3 q), then each block's P V into fresh
        // accumulators, added to O^T in fp32: O^T summed over a chunk's blocks on the fp8 tensor
        // cores would lose precision with the chunk's length (the wide tile's kQSplit,
        // decode_fp8_wide.cuh). P's residual first. Four groups of two output-dim tiles, two
        // accumulators in turn, so that group g + 1's products run while group g's are added
        // (1.3% faster than two halves each waited for, H200).
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            uint4 x[4];  // tokens 4q + (j + q) % 4 of the 16 (fp8_p_position)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const int tok = 32 * kk + 16 * h + 4 * q + ((j + q) & 3);
              x[j] = load_v16(v_chunk, u, tok);
              if (tail && tok >= valid) x[j] = make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              const uint32_t rows[4] = {word(x[0], k), word(x[1], k), word(x[2], k), word(x[3], k)};
              uint32_t dims[4];
              fp8::transpose4x4(rows, dims);
#pragma unroll
              for (int i = 0; i < 4; ++i) a[kk][4 * (k % 2) + i][k / 2 + 2 * h] = dims[i];
            }
          }
        }
        const uint64_t p_desc = smem_desc_sw64(p_addr, 512);
        const uint64_t p_low_desc = smem_desc_sw64(p_addr + kN * kBlockN, 512);
        constexpr int kGroupTiles = 2, kGroups = kMTiles / kGroupTiles;
        float part[2][kGroupTiles][kVals];
        const auto issue = [&](int g) {
          wgmma_fence();
#pragma unroll
          for (int mi = 0; mi < kGroupTiles; ++mi) {
            const int mt = g * kGroupTiles + mi;
#pragma unroll
            for (int kk = 0; kk < 2; ++kk) {
              wgmma_m64nNk32_e4m3_rs<kN>(part[g % 2][mi], a[kk][mt],
                                         desc_advance(p_low_desc, kk * 32), kk != 0 ? 1 : 0);
            }
#pragma unroll
            for (int kk = 0; kk < 2; ++kk) {
              wgmma_m64nNk32_e4m3_rs<kN>(part[g % 2][mi], a[kk][mt], desc_advance(p_desc, kk * 32),
                                         1);
            }
          }
          wgmma_commit_group();
        };
        const auto add = [&](int g) {
#pragma unroll
          for (int mi = 0; mi < kGroupTiles; ++mi) {
            fence_accumulators(part[g % 2][mi]);
#pragma unroll
            for (int i = 0; i < kVals; ++i) o[g * kGroupTiles + mi][i] += part[g % 2][mi][i];
          }
        };
        issue(0);
        issue(1);
        // V is in registers: every load of the stage has landed once a wgmma reading its
        // fragments has issued (group 0 reads a piece of each). Given back right after the loads
        // were issued (the first version), bench's checks failed now and then (outputs off by up
        // to 1.4e-2, varying from run to run; H200, batch 8, L 4096): most likely the next
        // block's copy rewrote the stage before the loads had landed
        // (bench/results/2026-11-29-h200-fp8-qsplit-narrow).
        arrive(&sm.empty[stage]);
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
          if (g + 1 < kGroups) {
            wgmma_wait_group<1>();
          } else {
            wgmma_wait_group<0>();
          }
          add(g);
          if (g + 2 < kGroups) issue(g + 2);
        }
      } else if constexpr (kFp8Q) {
        const uint64_t p_desc = smem_desc_sw64(p_addr, 512);
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            uint4 x[4];  // tokens 4q + (j + q) % 4 of the 16 (fp8_p_position)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const int tok = 32 * kk + 16 * h + 4 * q + ((j + q) & 3);
              x[j] = load_v16(v_chunk, u, tok);
              if (tail && tok >= valid) x[j] = make_uint4(0, 0, 0, 0);
            }
            if (h == 0 && kk >= kABuffers) wgmma_wait_group<0>();
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              const uint32_t rows[4] = {word(x[0], k), word(x[1], k), word(x[2], k), word(x[3], k)};
              uint32_t dims[4];
              fp8::transpose4x4(rows, dims);
#pragma unroll
              for (int i = 0; i < 4; ++i)
                a[kk % kABuffers][4 * (k % 2) + i][k / 2 + 2 * h] = dims[i];
            }
          }
          wgmma_fence();
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            wgmma_m64nNk32_e4m3_rs<kN>(o[mt], a[kk % kABuffers][mt], desc_advance(p_desc, kk * 32),
                                       1);
          }
          wgmma_commit_group();
          // V is in registers (its loads have landed once the wgmmas reading them have issued;
          // the kQSplit branch above says why not earlier).
          if (kk == 1) arrive(&sm.empty[stage]);
        }
      } else {
        const uint64_t p_desc = smem_desc_sw128(p_addr, 0, 1024);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          uint4 x[4];  // tokens 2q, 2q + 1 (odd quads the other way round), and both + 8
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int tok = 16 * kk + 2 * q + 8 * (j / 2) + ((j % 2) ^ (q & 1));
            x[j] = load_v16(v_chunk, u, tok);
            if (tail && tok >= valid) x[j] = make_uint4(0, 0, 0, 0);
          }
          // k-step kk - kABuffers, whose registers these are, is done.
          if (kk >= kABuffers) wgmma_wait_group<kABuffers - 1>();
#pragma unroll
          for (int k = 0; k < 4; ++k) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const uint32_t sel = pair_sel + 0x1010u * i;
              const int mt = 4 * (k % 2) + i, e = k / 2;
              a[kk % kABuffers][mt][e] =
                  fp8::widen_odd_bytes<TQ>(fp8::prmt(word(x[0], k), word(x[1], k), sel));
              a[kk % kABuffers][mt][e + 2] =
                  fp8::widen_odd_bytes<TQ>(fp8::prmt(word(x[2], k), word(x[3], k), sel));
            }
          }
          wgmma_fence();
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            wgmma_m64nNk16_rs<TQ, kN>(o[mt], a[kk % kABuffers][mt], desc_advance(p_desc, kk * 32),
                                      1);
          }
          wgmma_commit_group();
          if (kk == 3) arrive(&sm.empty[stage]);  // V is in registers (as above)
        }
      }
      wgmma_wait_group<0>();
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) fence_accumulators(o[mt]);
      trace(wg, 5);
    }
    n_block += static_cast<uint32_t>(n_blocks);
    if (wg == 0 && t == 0) grid_stamp(3);

    // Epilogue: each column's LSE and factor (times the V scale), then the rows.
    float factor[kCols];
    narrow_column_factors<kN>(p, sm, c, row0, m, l, scale_log2, kFp8Ops ? kFp8PLog2 : 0.0f,
                              scales.v, factor);
    const bool merged = c.slot == plan::kSlotCluster;  // left over the stages for the cluster

    float* rows_buf = merged ? reinterpret_cast<float*>(s.kv) : s.exchange;
    write_permuted_rows<TOut, kN>(p, c, rows_buf, merged, row0, wg, lane, group, o, factor);
  }
  if (tid == 0) grid_stamp(4);
}

#endif  // MLAKIT_SM90_WGMMA

}  // namespace mlakit::sm90
