// Sparse decode of the V3.2 cache (656 bytes a token: 512 e4m3, 4 fp32 scales, 64 bf16 RoPE) with
// a 16-bit q on the narrow tile: up to 32 query rows as wgmma's N, the cached bytes widened in
// registers as the fp8 narrow tile does (decode_fp8_narrow.cuh), so nothing widens in shared
// memory and the producer only copies. Tactics kSparseNarrowTactic + 0 (persistent) and + 1
// (one-shot), launch.h.
//  - Producer (the warpgroup, produce_sparse_narrow): per block, the tokens of the compacted slots
//    copied by cp.async into the stage as cached, token k at k * 656. Three or four stages
//    (SparseNarrowLayout).
//  - Consumers: warpgroup w takes blocks w, w + 2, ... of a chunk alone (own_blocks), as in the
//    fp8 narrow tile. Per block:
//      S^T = K Q^T   36 wgmma m64nNk16, A = K widened from the stage in registers (e4m3 exactly,
//                    RoPE as cached), B = Q as the 16-bit narrow tile holds it. The 128 values of
//                    each scale group accumulate apart (two accumulators alternate) and are added
//                    in fp32 times the token's scale, so any fp32 scale is exact.
//      mask, column max, P^T as decode_narrow.cuh (16-bit P^T in the exchange buffer).
//      O^T += V^T P^T  V^T from registers: thread row group G = 8 warp + lane / 4 loads dims
//                    16G .. 16G + 15 (scale group = warp) of each token its fragments need, pairs
//                    and widens them times the token's scale (power-of-two scales in bf16 by one
//                    multiply, exact; otherwise through fp32, one rounding); the stage goes back
//                    once V is in registers. Output dims permuted as in the fp8 narrow tile.
//    Tokens past a block's count are zero-filled; their S is masked, their V values are zeros.
// Trace points (trace.cuh, trace builds only): each consumer warpgroup 0 block start, 1 its data
// landed, 3 S done, 4 P^T out, 5 P V done; the producer (its thread 0) 8 the stage free, 10 the
// block's copies issued, 12 the slots of the block two ahead requested.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cuda/ptx>
#include <type_traits>
#include <utility>

#include "backends/sm90/config.h"
#include "backends/sm90/decode_fp8_narrow.cuh"
#include "backends/sm90/decode_narrow.cuh"
#include "backends/sm90/device.cuh"
#include "backends/sm90/gather.cuh"
#include "backends/sm90/launch.h"
#include "backends/sm90/params.h"
#include "backends/sm90/sparse_entry.cuh"
#include "backends/sm90/trace.cuh"
#include "backends/sm90/wgmma.cuh"
#include "kernels/common/fp8.cuh"
#include "kernels/common/ptx.h"
#include "plan/work.cuh"

namespace mlakit::sm90 {

// The shared-memory plan: the Q tile as the 16-bit narrow tile holds it (9 column chunks of
// kTileRows x 64 in the 128-byte swizzle), stages of 64 tokens as cached (656 bytes each), the
// exchange buffer (each warpgroup's P^T tile, then kPassRows rows of fp32 at a time for the
// epilogue). 16 rows: 4 stages, passes of 8 rows; 32 rows: 3 stages (4 do not fit beside its Q),
// passes of 16.
template <int kTileRows>
struct SparseNarrowLayout {
  static constexpr int kStages = kTileRows == 16 ? 4 : 3;
  static constexpr int kPassRows = kTileRows == 16 ? 8 : kNarrowPassRows;
  static constexpr int kStageBytes = kBlockN * kBlockwiseBytes;
  static constexpr int kQChunkBytes = kTileRows * 128;
  static constexpr int kQBytes = kQkChunks * kQChunkBytes;
  static constexpr int kPBytes = kTileRows * 128;  // one warpgroup's P^T: kTileRows x 64 x 2
  static constexpr size_t kQOffset = 0;
  static constexpr size_t kKvOffset = kQOffset + kQBytes;
  static constexpr size_t kExchangeOffset = kKvOffset + size_t{kStages} * kStageBytes;
  static constexpr size_t kExchangeBytes = size_t{kPassRows} * kMergeStride * 4;
  static constexpr size_t kSmallOffset = kExchangeOffset + kExchangeBytes;
  static constexpr size_t kSmemBytes = kSmallOffset + sizeof(SmallStorage) + 1024;
  static_assert(kTileRows == 16 || kTileRows == 32);
  static_assert(kStageBytes % 1024 == 0 && kQBytes % 1024 == 0, "swizzle atoms stay aligned");
  static_assert(2 * kPBytes <= kExchangeBytes);
  static_assert(kStages <= kMaxStages);
  static_assert(kSmemBytes <= 227 * 1024, "an sm_90 CTA has at most 227 KB");
};

// Registers after setmaxnreg (the CTA's shape: kSparseThreads, sparse_entry.cuh).
inline constexpr int kSparseNarrowProducerRegisters = 24;
inline constexpr int kSparseNarrowConsumerRegisters = 232;
static_assert(fits_sparse_launch(kSparseNarrowConsumerRegisters, kSparseNarrowConsumerRegisters,
                                 kSparseNarrowProducerRegisters));

#ifdef MLAKIT_SM90_WGMMA

// Where a token's parts lie in its 656 bytes.
inline constexpr int kV32ScaleAt = kDv;      // 4 fp32 scales, one per 128 dims
inline constexpr int kV32RopeAt = kDv + 16;  // 64 bf16

// The producer's kWarps warps: the Q tile per chunk (the first warp), then each block's tokens as
// cached by cp.async: warp w copies tokens kT w .. kT w + kT - 1 (kT = 64 / kWarps), each token's
// 41 pieces of 16 bytes as one instruction of 32 pieces (its first 512 bytes) and one of 9; pieces
// of tokens past the block's count are zero-filled without a read. Each thread's copies then arrive
// on the stage's barrier (cp.async.mbarrier.arrive.noinc, 32 kWarps arrivals) and it moves on:
// nothing waits for them here. A warp's stream runs at a fixed rate (sparse_entry.cuh): the sparse
// mma kernel at h_q 16, batch 128 took 103 us with 4 warps, 90 with 8; with 8, the copies alone
// (consumers only releasing) 56, the consumers alone (nothing copied) 76 (H200, 2026-11-28). The
// slots are read two blocks ahead. L: the shared-memory plan (stages, stage and Q bytes); kN: the
// tile's rows. kCluster (the sparse mma kernel's cluster schedule): the chunk is
// SparseClusterChunks', each entry goes through direct_slot (indices as given), and lane 0 of each
// warp writes its 8 tokens' bits of the stage's bad_tokens (no index to read: masked) and arrives
// on the stage's barrier (release) after its copies' arrival, which the barrier counts (kWarps
// more). kTokenUnroll: the token loop's unrolling (2: 21 instructions a token instead of 29; the
// sparse narrow kernel's 24-register producer keeps 1).
template <typename L, int kN, int kWarps, bool kCluster = false, int kTokenUnroll = 1>
__device__ __forceinline__ void produce_sparse_narrow(const DecodeParams& p, const Smem& s,
                                                      int m_tile, int32_t cta) {
  constexpr int kPieces = kBlockwiseBytes / 16;  // 41 a token
  constexpr int kWarpTokens = kBlockN / kWarps;  // 16 or 8 a warp
  static_assert(kBlockwiseBytes % 16 == 0 && kBlockN % kWarps == 0);
  static_assert(!kCluster || kWarpTokens == 8, "bad_tokens is written a byte a warp");
  const int t = static_cast<int>(threadIdx.x) - kConsumerThreads;
  const int warp = __shfl_sync(0xffffffffu, t / 32, 0);
  const int lane = t % 32;
  SmallStorage& sm = *s.small;
  const int32_t row0 = m_tile * kN;
  const uint32_t kv_smem = ptx::smem_u32(s.kv);
  auto chunks = sparse_chunks<kCluster>(p, sm, cta);
  plan::Chunk c;
  uint32_t n_chunk = 0, n_block = 0;
  while (chunks.next(&c)) {
    if (warp == 0) issue_q<L, kN>(p, s, c, row0, n_chunk, lane);
    ++n_chunk;
    const int32_t* table = p.block_table + int64_t{c.request} * p.block_table_stride;
    // Lane j < 16 holds the entry of token 16 warp + j of the block at tok0 (-1 past the end):
    // its slot, or (kCluster) the index as given, turned into a slot by direct_slot only when
    // its block is copied, so that the load of an entry two blocks ahead is not waited for at
    // once (its range check and division stalled the producer a global load's latency a block).
    const auto slot_at = [&](int32_t tok0) {
      const int32_t tok = tok0 + kWarpTokens * warp + lane % kWarpTokens;
      return tok < c.token_end ? table[tok] : -1;
    };
    int32_t tok0 = c.token_begin;
    int32_t sa = slot_at(tok0), sb = slot_at(tok0 + kBlockN);
    const auto block = [&](int32_t& sl) {
      if (tok0 >= c.token_end) return false;
      const uint32_t stage = n_block % L::kStages, phase = (n_block / L::kStages) & 1;
      wait_parity(&sm.empty[stage], phase ^ 1);
      if constexpr (kCluster) sl = direct_slot(p, sl);
      if (t == 0) trace(2, 8);
      const uint32_t dst = kv_smem + stage * L::kStageBytes + warp * kWarpTokens * kBlockwiseBytes;
      // Lane j copies pieces j and (j < 9) j + 32 of each of the warp's tokens: a token's first
      // 512 bytes in one instruction, its last 144 in a second of 9 lanes. The token's slot
      // comes from its lane; the address is one multiply-add of the slot by the token stride
      // (below 2^32, launch.cc) onto the lane's piece of the cache's base.
      const uint32_t stride = static_cast<uint32_t>(p.kv_view.stride_page);
      const uint8_t* const lane_src = p.kv_cache + 16 * lane;
      const uint32_t lane_dst = dst + 16 * lane;
      const bool tail_lane = lane < kPieces - 32;
#pragma unroll kTokenUnroll
      for (int k = 0; k < kWarpTokens; ++k) {
        const int32_t slot = __shfl_sync(0xffffffffu, sl, k);
        const uint8_t* src =
            lane_src + static_cast<uint64_t>(static_cast<uint32_t>(max(slot, 0))) * stride;
        const int bytes = slot >= 0 ? 16 : 0;
        const uint32_t d = lane_dst + k * kBlockwiseBytes;
        ptx::cp_async_cg_shared_global(d, src, bytes);
        if (tail_lane) ptx::cp_async_cg_shared_global(d + 512, src + 512, bytes);
      }
      ptx::cp_async_mbarrier_arrive_noinc(ptx::smem_u32(&sm.full[stage][0]));
      if constexpr (kCluster) {
        const uint32_t bad = __ballot_sync(0xffffffffu, sl < 0) & 0xffu;  // lanes 0..7: its tokens
        if (lane == 0) {
          reinterpret_cast<uint8_t*>(&sm.bad_tokens[stage])[warp] = static_cast<uint8_t>(bad);
          arrive(&sm.full[stage][0]);  // release: the byte before the stage is seen full
        }
      }
      if (t == 0) trace(2, 10);
      sl = slot_at(tok0 + 2 * kBlockN);
      tok0 += kBlockN;
      ++n_block;
      if (t == 0) trace(2, 12);
      return true;
    };
    while (block(sa) && block(sb)) {
    }
  }
}

// Two 16-bit RoPE values as cached (bf16) in q's type T.
template <typename T>
__device__ __forceinline__ uint32_t rope_pair(uint32_t v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return v;
  } else {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
    return pack2<T>(f.x, f.y);
  }
}

// The A fragments of S^T = K Q^T for the 4 k-steps of column chunk j (dims 64j .. 64j + 63): K at
// the thread's tokens (rows a and a + 8 of the stage), dims 16 kk + 2q, + 1 and + 8, + 9, in T:
// the e4m3 values widened exactly (chunks 0..7, unscaled), the RoPE values (chunk 8) as cached.
template <typename T>
__device__ __forceinline__ void load_v32_k_fragments(const uint8_t* row_a, int j, int q,
                                                     uint32_t (&a)[4][4]) {
  constexpr int kRowB = 8 * kBlockwiseBytes;
  if (j < kQkChunks - 1) {
    const uint8_t* at = row_a + 64 * j + 2 * q;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint8_t* x = at + 16 * kk;
      a[kk][0] = fp8::widen_low_pair<T>(*reinterpret_cast<const uint16_t*>(x));
      a[kk][1] = fp8::widen_low_pair<T>(*reinterpret_cast<const uint16_t*>(x + kRowB));
      a[kk][2] = fp8::widen_low_pair<T>(*reinterpret_cast<const uint16_t*>(x + 8));
      a[kk][3] = fp8::widen_low_pair<T>(*reinterpret_cast<const uint16_t*>(x + kRowB + 8));
    }
  } else {
    const uint8_t* at = row_a + kV32RopeAt + 4 * q;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint8_t* x = at + 32 * kk;
      a[kk][0] = rope_pair<T>(*reinterpret_cast<const uint32_t*>(x));
      a[kk][1] = rope_pair<T>(*reinterpret_cast<const uint32_t*>(x + kRowB));
      a[kk][2] = rope_pair<T>(*reinterpret_cast<const uint32_t*>(x + 16));
      a[kk][3] = rope_pair<T>(*reinterpret_cast<const uint32_t*>(x + kRowB + 16));
    }
  }
}

// Two e4m3 values (bytes 1 and 3 of y) times their tokens' scales (lo, hi) as two T: exact bits
// times the factor 2^120 x scale in one bf16 multiply when `pow2` (every scale a power of two in
// [2^-120, 2^7], pow2_scale), else through fp32 (one rounding).
template <typename T, bool kPow2>
__device__ __forceinline__ uint32_t widen_scaled(uint32_t y, uint32_t factor2, float lo, float hi) {
  if constexpr (kPow2) {
    const uint32_t bits = ((y >> 4) & 0x07f007f0u) | (y & 0x80008000u);
    const __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&bits),
                                     *reinterpret_cast<const __nv_bfloat162*>(&factor2));
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const uint32_t h = fp8::widen_odd_bytes<__half>(y);
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
    return pack2<T>(f.x * lo, f.y * hi);
  }
}

// The A fragments of one k-step of O^T += V^T P^T from the 16-byte pieces x[0..3] (tokens 2q,
// 2q + 1, 2q + 8, 2q + 9 of the k-step) and their scales: register (tile mt, e) pairs the two
// tokens' byte of dim 16G + 8(e % 2) + mt (as decode_fp8_narrow.cuh's 16-bit path).
template <typename T, bool kPow2>
__device__ __forceinline__ void widen_v_fragments(const uint4 (&x)[4], const float (&sc)[4],
                                                  uint32_t (&a)[kDv / 64][4]) {
  uint32_t f01 = 0, f23 = 0;
  if constexpr (kPow2) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(sc[0] * 0x1.0p120f, sc[1] * 0x1.0p120f);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(sc[2] * 0x1.0p120f, sc[3] * 0x1.0p120f);
    f01 = *reinterpret_cast<const uint32_t*>(&lo);
    f23 = *reinterpret_cast<const uint32_t*>(&hi);
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t sel = 0x4000u + 0x1010u * i;  // byte i of each token into bytes 1 and 3
      const int mt = 4 * (k % 2) + i, e = k / 2;
      a[mt][e] =
          widen_scaled<T, kPow2>(fp8::prmt(word(x[0], k), word(x[1], k), sel), f01, sc[0], sc[1]);
      a[mt][e + 2] =
          widen_scaled<T, kPow2>(fp8::prmt(word(x[2], k), word(x[3], k), sel), f23, sc[2], sc[3]);
    }
  }
}

template <typename T, int kN>
__device__ __forceinline__ void consume_sparse_narrow(const DecodeParams& p, const Smem& s,
                                                      int m_tile, int32_t cta) {
  static_assert(kN == kNarrowPassRows || kN == 2 * kNarrowPassRows, "16 or 32 rows");
  using L = SparseNarrowLayout<kN>;
  constexpr int kVals = kN / 2;      // accumulator values per thread of one m64nN product
  constexpr int kCols = kN / 4;      // the distinct columns (query rows) among them
  constexpr int kMTiles = kDv / 64;  // O^T: 8 products of 64 output dims
  constexpr int kRowB = 8 * kBlockwiseBytes;
  const int tid = static_cast<int>(threadIdx.x);
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int t = tid % 128;
  const int lane = t % 32, warp = t / 32, q = lane % 4;
  // The thread's tokens of a block (rows of S^T): tok_a and tok_a + 8; its columns: value i is
  // column col(ci(i)); its output dims: 16 G .. 16 G + 15, all in scale group `warp`.
  const int tok_a = 16 * warp + lane / 4;
  const int group = 8 * warp + lane / 4;
  const auto ci_of = narrow_ci;
  const auto col_of = [lane](int ci) { return narrow_col(lane, ci); };
  SmallStorage& sm = *s.small;
  const int32_t row0 = m_tile * kN;
  // The cache's extra scale (fp8::read_scales: 1 unless given) on the NoPE part of the scores
  // (with the tokens' scales, add_group) and on the outputs; not on the RoPE part.
  const fp8::Scales scales = fp8::read_scales(p);
  const float scale_log2 = p.scale_log2 * scales.q;
  uint8_t* const p_tile = reinterpret_cast<uint8_t*>(s.exchange) + wg * L::kPBytes;
  const uint32_t p_addr = ptx::smem_u32(p_tile);
  const uint64_t q_desc = smem_desc_sw128(ptx::smem_u32(s.q), 0, 1024);
  const uint64_t p_desc = smem_desc_sw128(p_addr, 0, 1024);

  plan::ChunkIterator chunks(p.plan, p.schedule, cta, p.batch, &sm.part, p.seq_lens, p.max_len);
  plan::Chunk c;
  uint32_t n_chunk = 0, n_block = 0;
  WarpgroupSync wg_sync{.bar = &sm.wg_sync[wg]};
  while (chunks.next(&c)) {
    int32_t limit[kCols], min_limit;
    float m[kCols], l[kCols], o[kMTiles][kVals];
    const OwnBlocks share = start_narrow_chunk<kN>(p, c, sm, row0, lane, wg, n_block, n_chunk,
                                                   limit, min_limit, m, l, o);
    const int32_t n_blocks = share.n, first_own = share.first, last_own = share.last;

#pragma unroll 1
    for (int32_t b = first_own; b < n_blocks; b += 2) {
      const uint32_t nb = n_block + static_cast<uint32_t>(b);
      const uint32_t stage = nb % L::kStages, phase = (nb / L::kStages) & 1;
      const int32_t tok0 = c.token_begin + b * kBlockN;
      const int32_t valid = c.token_end - tok0;
      const uint8_t* kv_stage = s.kv + stage * L::kStageBytes;
      const uint8_t* row_a = kv_stage + tok_a * kBlockwiseBytes;
      trace(wg, 0);
      wait_parity(&sm.full[stage][0], phase);
      if (nb == 0 && t == 0) grid_stamp(2);
      trace(wg, 1);

      // S^T = K Q^T: scale group g (column chunks 2g, 2g + 1), then the RoPE chunk (group 4), each
      // into its accumulator part[g % kBuf], added in fp32 times its tokens' scales once done. With
      // 16 rows two chunks' fragments and two accumulators alternate (one chunk widened, one
      // group added while the next one's products run); with 32 rows one of each (two spilled
      // 312 bytes).
      constexpr int kBuf = kN == kNarrowPassRows ? 2 : 1;
      float st[kVals], part[kBuf][kVals];
      const auto add_group = [&](int g) {
        float(&pg)[kVals] = part[g % kBuf];
        fence_accumulators(pg);
        // The tokens' scales of the group, read when needed (kept, they cost 32 rows 8 registers).
        const float fa =
            g < 4 ? *reinterpret_cast<const float*>(row_a + kV32ScaleAt + 4 * g) * scales.v : 1;
        const float fb =
            g < 4 ? *reinterpret_cast<const float*>(row_a + kRowB + kV32ScaleAt + 4 * g) * scales.v
                  : 1;
#pragma unroll
        for (int i = 0; i < kVals; ++i) {
          const float x = pg[i] * ((i / 2) % 2 == 0 ? fa : fb);
          st[i] = g == 0 ? x : st[i] + x;
        }
      };
      uint32_t a[kBuf][4][4];
#pragma unroll
      for (int j = 0; j < kQkChunks; ++j) {
        // Chunk j - kBuf, whose registers these are, is done; so is group g's last chunk 2g + 1
        // from j = 2g + 1 + kBuf on.
        if (j >= kBuf) wgmma_wait_group<kBuf - 1>();
        if (j >= 1 + kBuf && (j - 1 - kBuf) % 2 == 0) add_group((j - 1 - kBuf) / 2);
        load_v32_k_fragments<T>(row_a, j, q, a[j % kBuf]);
        const int g = j / 2;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          wgmma_m64nNk16_rs<T, kN>(part[g % kBuf], a[j % kBuf][kk],
                                   desc_advance(q_desc, j * L::kQChunkBytes + kk * 32),
                                   (j % 2 == 0 && kk == 0) ? 0 : 1);
        }
        wgmma_commit_group();
      }
      if constexpr (kBuf == 2) {
        wgmma_wait_group<1>();
        add_group(3);
      }
      wgmma_wait_group<0>();
      add_group(4);
      trace(wg, 3);
      if (b == last_own && t == 0) arrive(&sm.q_empty);

      // Mask, column max of the block, the steps of the running maxima.
      MaxStep step[kCols];
      const bool moved = narrow_column_steps<kN>(st, limit, min_limit, /*bad=*/0, tok0, tok_a, wg,
                                                 sm, wg_sync, scale_log2, m, step);

      // P^T (row = query row, 64 tokens in the 128-byte swizzle), the sums.
      float sum[kCols];
#pragma unroll
      for (int ci = 0; ci < kCols; ++ci) sum[ci] = 0.0f;
#pragma unroll
      for (int i = 0; i < kVals; ++i) {
        const int ci = ci_of(i);
        const float pv = ptx::ex2_approx_ftz_f32(st[i] * scale_log2 - step[ci].scaled);
        sum[ci] += pv;
        const uint32_t at = p_addr + swizzled(col_of(ci), 2 * (tok_a + 8 * ((i / 2) % 2)));
        asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(at), "h"(bits16<T>(pv)) : "memory");
      }
#pragma unroll
      for (int ci = 0; ci < kCols; ++ci) l[ci] = l[ci] * step[ci].alpha + sum[ci];
      cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // P^T, for wgmma
      wg_sync.sync();  // (also: every thread has read col_max)
      trace(wg, 4);

      if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int i = 0; i < kVals; ++i) o[mt][i] *= step[ci_of(i)].alpha;
        }
      }

      // O^T += V^T P^T, V^T from registers.
      const uint8_t* v_at = kv_stage + 16 * group;
      const uint8_t* scale_at = kv_stage + kV32ScaleAt + 4 * warp;
      const bool tail = valid < kBlockN;  // past the count: zero-filled, and zeros here too
      constexpr int kABuffers = kN == kNarrowPassRows ? 2 : 1;
      uint32_t av[kABuffers][kMTiles][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        uint4 x[4];  // tokens 2q, 2q + 1, 2q + 8, 2q + 9 of the k-step: every bank once
        float sc[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int tok = 16 * kk + 2 * q + 8 * (j / 2) + j % 2;
          x[j] = *reinterpret_cast<const uint4*>(v_at + tok * kBlockwiseBytes);
          sc[j] = *reinterpret_cast<const float*>(scale_at + tok * kBlockwiseBytes);
          if (tail && tok >= valid) {
            x[j] = make_uint4(0, 0, 0, 0);
            sc[j] = 1.0f;
          }
        }
        if (kk == 3) arrive(&sm.empty[stage]);  // V is in registers
        // k-step kk - kABuffers, whose registers these are, is done.
        if (kk >= kABuffers) wgmma_wait_group<kABuffers - 1>();
        const bool pow2 = std::is_same_v<T, __nv_bfloat16> &&
                          __all_sync(0xffffffffu, pow2_scale(sc[0]) && pow2_scale(sc[1]) &&
                                                      pow2_scale(sc[2]) && pow2_scale(sc[3]));
        if (pow2) {
          widen_v_fragments<T, true>(x, sc, av[kk % kABuffers]);
        } else {
          widen_v_fragments<T, false>(x, sc, av[kk % kABuffers]);
        }
        wgmma_fence();
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          wgmma_m64nNk16_rs<T, kN>(o[mt], av[kk % kABuffers][mt], desc_advance(p_desc, kk * 32), 1);
        }
        wgmma_commit_group();
      }
      wgmma_wait_group<0>();
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) fence_accumulators(o[mt]);
      trace(wg, 5);
    }
    n_block += static_cast<uint32_t>(n_blocks);
    if (wg == 0 && t == 0) grid_stamp(3);

    // Epilogue: each column's LSE and factor (times the cache's extra scale), then the rows.
    float factor[kCols];
    narrow_column_factors<kN>(p, sm, c, row0, m, l, scale_log2, 0.0f, scales.v, factor);
    write_permuted_rows<T, kN, L::kPassRows>(p, c, s.exchange, /*merged=*/false, row0, wg, lane,
                                             group, o, factor);
  }
}

#endif  // MLAKIT_SM90_WGMMA

// T: q's type and out's (bf16 or fp16); kN: 16 or 32 rows. Schedules persistent and one-shot.
template <typename T, int kN>
__global__ void __launch_bounds__(kSparseThreads, 1)
    sparse_narrow_kernel(const __grid_constant__ DecodeParams p) {
  using L = SparseNarrowLayout<kN>;
#ifdef MLAKIT_SM90_WGMMA
  extern __shared__ uint8_t smem_raw[];
  uint8_t* base = aligned_smem(smem_raw);
  const Smem s{.q = base + L::kQOffset,
               .kv = base + L::kKvOffset,
               .exchange = reinterpret_cast<float*>(base + L::kExchangeOffset),
               .small = reinterpret_cast<SmallStorage*>(base + L::kSmallOffset)};
  SmallStorage& sm = *s.small;
  const int32_t m_tiles = (p.rows + kN - 1) / kN;
  const SparseCta at = sparse_cta<false>(p, m_tiles);
  const int m_tile = at.m_tile;
  const int32_t cta = at.cta;
  if (threadIdx.x == 0) grid_stamp(0);
  if (threadIdx.x == 0) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(&p.q_map) : "memory");
    for (int i = 0; i < L::kStages; ++i) {
      // every producer thread's copies
      cuda::ptx::mbarrier_init(&sm.full[i][0], kSparseProducerThreads);
      cuda::ptx::mbarrier_init(&sm.empty[i], 128);  // every thread of the owning warpgroup
    }
    cuda::ptx::mbarrier_init(&sm.q_full, 1);
    cuda::ptx::mbarrier_init(&sm.q_empty, 2);
    for (int w = 0; w < 2; ++w) cuda::ptx::mbarrier_init(&sm.wg_sync[w], 128);
    trace_reset();
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
  }
  sparse_prologue(p, sm, at);
  if (threadIdx.x >= kConsumerThreads) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kSparseNarrowProducerRegisters));
    produce_sparse_narrow<L, kN, kSparseProducerWarps>(p, s, m_tile, cta);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kSparseNarrowConsumerRegisters));
    consume_sparse_narrow<T, kN>(p, s, m_tile, cta);
  }
  if (threadIdx.x == 0) grid_stamp(5);
  trace_finish();
#endif
}

template <typename T, int kN>
const DecodeKernel& sparse_narrow_kernel_entry() {
  return SparseEntry<sparse_narrow_kernel<T, kN>, SparseNarrowLayout<kN>::kSmemBytes,
                     kSparseThreads>::entry();
}

}  // namespace mlakit::sm90
