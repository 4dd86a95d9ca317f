// The narrow tile's consumers (config.h): up to 32 query rows, the rows as wgmma's N. Per chunk,
// warpgroup w takes the blocks of stage w alone (the producer and the stages are the wide tile's):
//   S^T = K Q^T        36 wgmma m64nNk16 (A = K, B = Q, both K-major), each column chunk as soon
//                      as it lands
//   mask; column max   per query row over the block's 64 tokens: 2 in the thread, 8 lanes, then
//                      the 4 warps through shared memory (the warpgroup's mbarrier)
//   P^T                exp2(S^T - max) as 16-bit values in the warpgroup's share of the
//                      exchange buffer, one row of 64 tokens per query row (the K-major B
//                      operand); sums kept per thread
//   O^T += V^T P^T     8 x 4 wgmma m64nNk16 (A = V MN-major, 64 output columns each); the stage
//                      goes back once they finish
// At the chunk's end the two warpgroups' maxima and sums meet in shared memory, and their O^T in
// the exchange buffer, 16 rows of fp32 at a time: warpgroup 0 stores its share, warpgroup 1 adds
// its own, then all 256 threads write the rows out (output or partial) with 16-byte accesses. In
// the cluster schedule the merged rows go over the KV stages for the cluster merge instead.
#pragma once

#include <cuda/ptx>
#include <type_traits>
#include <utility>

#include "backends/sm90/config.h"
#include "backends/sm90/device.cuh"
#include "backends/sm90/gather.cuh"
#include "backends/sm90/params.h"
#include "backends/sm90/trace.cuh"
#include "backends/sm90/wgmma.cuh"
#include "kernels/common/numeric.cuh"
#include "kernels/common/ptx.h"
#include "plan/work.cuh"

namespace mlakit::sm90 {

#ifdef MLAKIT_SM90_WGMMA

// The 128 threads of one consumer warpgroup meet on its mbarrier (count 128; every thread
// arrives, then waits for the phase): release and acquire order the shared-memory writes before
// it against the reads after. With a named barrier per warpgroup (bar.sync 3 + w, 128) instead,
// racecheck reported hazards between one warpgroup's epilogue writes and the other's reads after
// the 256-thread epilogue barrier (and in the cluster merge); with these it reports none, and the
// speed is the same (H200, 2026-11-21).
struct WarpgroupSync {
  uint64_t* bar;
  uint32_t phase = 0;
  __device__ __forceinline__ void sync() {
    arrive(bar);
    wait_parity(bar, phase);
    phase ^= 1;
  }
};

// A float as the 16 bits of T (round to nearest even).
template <typename T>
__device__ __forceinline__ uint16_t bits16(float v) {
  return static_cast<uint16_t>(pack2<T>(v, 0.0f) & 0xffffu);
}

// Rows [valid, 64) of the stage's V (column chunks 0..7) set to zero: past the request's length
// the pages hold anything (NaN in the tests); P is 0 there but 0 x NaN is not.
__device__ __forceinline__ void zero_v_rows_all(uint32_t kv_stage, int32_t valid, int t) {
  constexpr int kPieces = kPChunk * 8;  // 16-byte pieces of a row's V
  const int n = (kBlockN - valid) * kPieces;
  for (int idx = t; idx < n; idx += 128) {
    const int row = valid + idx / kPieces;
    const uint32_t at = kv_stage + (idx / 8) % kPChunk * kChunkBytes + row * 128 + (idx % 8) * 16;
    asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(at), "r"(0) : "memory");
  }
}

// Waits for the P V groups one by one (oldest first) and releases chunk I of the stage after
// group I.
template <int... I>
__device__ __forceinline__ void release_in_order(uint64_t (&chunk_empty)[kQkChunks], int t,
                                                 std::integer_sequence<int, I...>) {
  constexpr int kGroups = sizeof...(I);
  ((wgmma_wait_group<kGroups - 1 - I>(), t == 0 ? arrive(&chunk_empty[I]) : void()), ...);
}

// Value i of an m64nN accumulator (wgmma.cuh) is column narrow_col(lane, narrow_ci(i)): the
// narrow tile's query rows, kN / 4 distinct ones per thread.
__device__ __forceinline__ int narrow_ci(int i) { return 2 * (i / 4) + i % 2; }
__device__ __forceinline__ int narrow_col(int lane, int ci) {
  return 8 * (ci / 2) + 2 * (lane % 4) + ci % 2;
}

// Masks S^T of a block (the thread's tokens tok_a, tok_a + 8 of the block at tok0; columns past
// their limit, and all of a token in a bad page: the producer's SmallStorage::bad_tokens), takes
// each column's max over the warpgroup (the 8 lanes of a column, then its 4 warps through shared
// memory: one warpgroup sync) and works out each column's step from the running max m (which it
// advances). Returns whether any of the thread's columns moved.
template <int kN>
__device__ __forceinline__ bool narrow_column_steps(float (&st)[kN / 2],
                                                    const int32_t (&limit)[kN / 4],
                                                    int32_t min_limit, uint64_t bad, int32_t tok0,
                                                    int tok_a, int wg, SmallStorage& sm,
                                                    WarpgroupSync& sync, float scale_log2,
                                                    float (&m)[kN / 4], MaxStep (&step)[kN / 4]) {
  constexpr int kVals = kN / 2, kCols = kN / 4;
  const int lane = static_cast<int>(threadIdx.x) % 32,
            warp = static_cast<int>(threadIdx.x) / 32 % 4;
  if (tok0 + kBlockN > min_limit || bad != 0) {
    const bool bad_token[2] = {plan::bad_token(bad, tok_a), plan::bad_token(bad, tok_a + 8)};
#pragma unroll
    for (int i = 0; i < kVals; ++i) {
      const int h = (i / 2) % 2;
      if (tok0 + tok_a + 8 * h >= limit[narrow_ci(i)] || bad_token[h]) st[i] = -INFINITY;
    }
  }
#pragma unroll
  for (int ci = 0; ci < kCols; ++ci) {
    const int i0 = 4 * (ci / 2) + ci % 2;
    float cm = fmaxf(st[i0], st[i0 + 2]);
#pragma unroll
    for (int offset = 4; offset < 32; offset *= 2) {
      cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, offset));
    }
    if (lane < 4) sm.col_max[wg][warp][narrow_col(lane, ci)] = cm;
  }
  sync.sync();
  bool moved = false;
#pragma unroll
  for (int ci = 0; ci < kCols; ++ci) {
    const int col = narrow_col(lane, ci);
    float mx = m[ci];
#pragma unroll
    for (int w = 0; w < 4; ++w) mx = fmaxf(mx, sm.col_max[wg][w][col]);
    step[ci] = max_step(m[ci], mx, scale_log2);
    moved |= step[ci].alpha != 1.0f;
  }
  return moved;
}

// The chunk's epilogue up to the rows: the warpgroups' maxima and sums per column meet in shared
// memory; one thread per column works out its LSE (the P factor 2^lse_shift_log2 taken off),
// writes it (lse, the partial's, or the cluster merge's), and each warpgroup's factor (1 / sum,
// the sink factor when the chunk is the whole request, v_scale); every thread returns its
// columns' factors of its warpgroup. (Every thread working out its own kCols columns was a chain
// of ~750 dependent instructions, log2f and a division per column; one per column saved 0.7-2.3
// us a call on the H200, record 2026-11-24-h200-epilogue.)
template <int kN>
__device__ __forceinline__ void narrow_column_factors(const DecodeParams& p, SmallStorage& sm,
                                                      const plan::Chunk& c, int32_t row0,
                                                      const float (&m)[kN / 4], float (&l)[kN / 4],
                                                      float scale_log2, float lse_shift_log2,
                                                      float v_scale, float (&factor)[kN / 4]) {
  constexpr int kCols = kN / 4;
  const int tid = static_cast<int>(threadIdx.x);
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int lane = tid % 32, warp = tid / 32 % 4;
#pragma unroll
  for (int ci = 0; ci < kCols; ++ci) {
#pragma unroll
    for (int offset = 4; offset < 32; offset *= 2) {
      l[ci] += __shfl_xor_sync(0xffffffffu, l[ci], offset);
    }
    if (lane < 4) {
      sm.wg_sum[wg][warp][narrow_col(lane, ci)] = l[ci];
      if (warp == 0) sm.wg_max[wg][narrow_col(lane, ci)] = m[ci];
    }
  }
  consumer_sync(kEpilogueBarrier);
  if (tid == 0) grid_stamp(6);
  const bool merged = c.slot == plan::kSlotCluster;
  const bool direct = c.slot == -1;
  if (tid < kN) {
    const int col = tid;
    const int32_t r = row0 + col;
    const float m0 = sm.wg_max[0][col], m1 = sm.wg_max[1][col];
    const float mx = fmaxf(m0, m1);
    const float scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;
    const float a0 = ptx::ex2_approx_ftz_f32(m0 * scale_log2 - scaled);
    const float a1 = ptx::ex2_approx_ftz_f32(m1 * scale_log2 - scaled);
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      s0 += sm.wg_sum[0][w][col];
      s1 += sm.wg_sum[1][w][col];
    }
    const float total = s0 * a0 + s1 * a1;
    const bool any = total > 0.0f;
    const float lse = any ? (scaled + log2f(total) - lse_shift_log2) * kLn2 : -INFINITY;
    float scale = any ? 1.0f / total : 0.0f;
    if (r < p.rows) {
      if (direct && p.sinks != nullptr && any) scale /= 1.0f + expf(p.sinks[r % p.h_q] - lse);
      if (merged) {
        sm.merge_lse[col] = lse;
      } else if (!direct) {
        p.plan.partial_lse[int64_t{c.slot} * p.rows + r] = lse;
      } else if (p.lse != nullptr && r < p.out_view.live_rows(c.request, p.rows)) {
        // natural or base 2; var_q: no row past the request's q_len
        p.lse[p.out_view.lse_index(c.request, r, p.rows)] = lse * p.lse_scale;
      }
    }
    sm.col_factor[0][col] = a0 * scale * v_scale;
    sm.col_factor[1][col] = a1 * scale * v_scale;
  }
  consumer_sync(kEpilogueBarrier);
#pragma unroll
  for (int ci = 0; ci < kCols; ++ci) factor[ci] = sm.col_factor[wg][narrow_col(lane, ci)];
  if (tid == 0) grid_stamp(7);
}

// Writes the kPassRows rows in rows_buf (fp32, kMergeStride apart) as query rows row0 + row_off ..
// of the chunk: to out (TOut) or, split, to the fp32 partial. All 256 consumer threads; a barrier
// at the end (rows_buf is written again next).
template <typename TOut, int kPassRows = kNarrowPassRows>
__device__ __forceinline__ void narrow_store_rows(const DecodeParams& p, const plan::Chunk& c,
                                                  const float* rows_buf, int32_t row0,
                                                  int row_off) {
  const int tid = static_cast<int>(threadIdx.x);
  const bool direct = c.slot == -1;
  const int64_t first_row = int64_t{c.slot} * p.rows;  // of the partial
  // Rows written: all of the partial's; of out, the request's (var_q: up to its q_len).
  const int32_t live = direct ? p.out_view.live_rows(c.request, p.rows) : p.rows;
  constexpr int kFloat4s = kDv / 4;
  static_assert(kPassRows * kFloat4s % kConsumerThreads == 0);
  // Unrolled, so the shared-memory loads are in flight together.
#pragma unroll
  for (int k = 0; k < kPassRows * kFloat4s / kConsumerThreads; ++k) {
    const int idx = tid + k * kConsumerThreads;
    const int row = idx / kFloat4s, col4 = idx % kFloat4s;
    const int32_t r = row0 + row_off + row;
    if (r >= live) continue;
    const float4 v = *reinterpret_cast<const float4*>(rows_buf + row * kMergeStride + 4 * col4);
    if (direct) {
      // out may be a view: the row's own offset (plan::RowView).
      TOut* g = static_cast<TOut*>(p.out) + p.out_view.offset(c.request, r) + 4 * col4;
      *reinterpret_cast<uint2*>(g) = {pack2<TOut>(v.x, v.y), pack2<TOut>(v.z, v.w)};
    } else {
      *reinterpret_cast<float4*>(p.plan.partial_out + (first_row + r) * kDv + 4 * col4) = v;
    }
  }
  consumer_sync(kEpilogueBarrier);
}

// start_narrow_chunk's step once Q has landed by default: none.
struct NoQStep {
  __device__ void operator()() const {}
};

// A narrow consumer warpgroup's chunk start: each of its columns' visible limit (with causal MTP
// fewer tokens for early query tokens) and the least of them, its share of the chunk's blocks,
// the running maxima and sums reset, O^T zeroed, and Q waited for (given back at once when the
// warpgroup has no block of the chunk). on_q runs once Q has landed, before that (the fp8 tile's
// split of a bf16 q, decode_fp8_narrow.cuh).
template <int kN, typename OnQ = NoQStep>
__device__ __forceinline__ OwnBlocks start_narrow_chunk(
    const DecodeParams& p, const plan::Chunk& c, SmallStorage& sm, int32_t row0, int lane, int wg,
    uint32_t n_block, uint32_t& n_chunk, int32_t (&limit)[kN / 4], int32_t& min_limit,
    float (&m)[kN / 4], float (&l)[kN / 4], float (&o)[kDv / 64][kN / 2], const OnQ& on_q = {}) {
  min_limit = c.token_end;
#pragma unroll
  for (int ci = 0; ci < kN / 4; ++ci) {
    limit[ci] = visible_limit(p, c, row0 + narrow_col(lane, ci));
    min_limit = min(min_limit, limit[ci]);
    m[ci] = -INFINITY;
    l[ci] = 0.0f;
  }
#pragma unroll
  for (int mt = 0; mt < kDv / 64; ++mt) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) o[mt][i] = 0.0f;
  }
  const OwnBlocks share = own_blocks(c, n_block, wg);
  wait_parity(&sm.q_full, n_chunk & 1);
  ++n_chunk;
  on_q();
  if (share.last < 0 && threadIdx.x % 128 == 0) arrive(&sm.q_empty);
  return share;
}

// kWiden (params.h) as the kernel's: kV4, sparse decode of the V4 cache; kGather, of the 16-bit and
// V3.2 caches (the V3.2 cache's blocks widened here at run time); kNone, the dense 16-bit cache.
template <typename T, int kN, Widen kWiden>
__device__ __forceinline__ void consume_narrow(const DecodeParams& p, const Smem& s, int m_tile,
                                               int32_t cta) {
  static_assert(kN == kNarrowPassRows || kN == 2 * kNarrowPassRows, "16 or 32 rows");
  using L = Layout<kN>;
  constexpr int kVals = kN / 2;      // accumulator values per thread of one m64nN product
  constexpr int kCols = kN / 4;      // the distinct columns (query rows) among them
  constexpr int kMTiles = kDv / 64;  // O^T: 8 products of 64 output columns
  const int tid = static_cast<int>(threadIdx.x);
  // Through a shuffle so the compiler knows it is the same across the warp.
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int t = tid % 128;
  const int lane = t % 32, warp = t / 32;
  // The thread's tokens of a block (rows of S^T; rows of O^T within each 64 output columns):
  // tok_a and tok_a + 8. Its columns: value i is column col(ci(i)) (wgmma.cuh).
  const int tok_a = 16 * warp + lane / 4;
  const auto ci_of = narrow_ci;
  const auto col_of = [lane](int ci) { return narrow_col(lane, ci); };
  SmallStorage& sm = *s.small;
  const uint32_t kv_addr = ptx::smem_u32(s.kv);
  const uint64_t q_desc = smem_desc_sw128(ptx::smem_u32(s.q), 0, 1024);
  const int32_t row0 = m_tile * kN;
  const float scale_log2 = p.scale_log2;
  const float k_scale = fp8::read_scales(p).v;  // sparse V3.2 / V4: the cache's extra scale
  // This warpgroup's P^T (kN rows of 64 tokens, 128-byte swizzle) over the exchange buffer, which
  // holds rows only after both warpgroups are past their blocks.
  const uint32_t p_buf = ptx::smem_u32(s.exchange) + wg * L::kQChunkBytes;
  static_assert(2 * L::kQChunkBytes <= L::kExchangeBytes && L::kExchangeOffset % 1024 == 0);

  plan::ChunkIterator chunks(p.plan, p.schedule, cta, p.batch, &sm.part, p.seq_lens, p.max_len);
  chunks.skip_dead_tiles(p.out_view, row0);  // var_q
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
      const uint32_t stage = nb % kStages, phase = (nb / kStages) & 1;
      const int32_t tok0 = c.token_begin + b * kBlockN;
      const int32_t valid = c.token_end - tok0;
      const uint32_t kv_stage = kv_addr + stage * kTileBytes;
      const uint32_t p_tile = p_buf;
      trace(wg, 0);

      // Sparse decode of the V3.2 or V4 cache: this warpgroup widens its block first (gather.cuh).
      if constexpr (kWiden == Widen::kV4) {
        wait_parity(&sm.full[stage][kPChunk], phase);
        dequant_v4<L, T>(sm, kv_stage, stage, t, wg, k_scale);
      } else if constexpr (kWiden == Widen::kGather) {
        if (p.fill == Fill::kGatherV32) {
          wait_parity(&sm.full[stage][kPChunk], phase);
          dequant_v32<L, T>(sm, kv_stage, stage, t, wg, k_scale);
        }
      }
      // S^T = K Q^T, chunk by chunk as the copies land.
      const uint64_t k_desc = smem_desc_sw128(kv_stage, 0, 1024);
      float st[kVals];
#pragma unroll
      for (int j = 0; j < kQkChunks; ++j) {
        wait_parity(&sm.full[stage][j], phase);
        if (j == 0 && nb == 0 && t == 0) grid_stamp(2);
        if (j == 0) trace(wg, 1);
        if (j == kQkChunks - 1) trace(wg, 2);
        wgmma_fence();  // after each wait, or ptxas serializes the wgmmas (C7520)
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          wgmma_m64nNk16<T, kN, 0>(st, desc_advance(k_desc, j * kChunkBytes + kk * 32),
                                   desc_advance(q_desc, j * L::kQChunkBytes + kk * 32),
                                   (j | kk) != 0 ? 1 : 0);
        }
      }
      wgmma_commit_group();
      wgmma_wait_group<0>();
      fence_accumulators(st);
      trace(wg, 3);
      if (t == 0) {
        arrive(&sm.chunk_empty[stage][kPChunk]);  // the rope chunk: read only by S^T
        if (b == last_own) arrive(&sm.q_empty);
      }

      // Mask, column max of the block, the steps of the running maxima.
      MaxStep step[kCols];
      const uint64_t bad =
          ptx::ld_shared_u64_here(ptx::smem_u32(&sm.bad_tokens[stage]));  // page_mask.cuh
      const bool moved = narrow_column_steps<kN>(st, limit, min_limit, bad, tok0, tok_a, wg, sm,
                                                 wg_sync, scale_log2, m, step);

      // P^T over the rope chunk (row = query row, 64 tokens in the 128-byte swizzle), the sums.
      float sum[kCols];
#pragma unroll
      for (int ci = 0; ci < kCols; ++ci) sum[ci] = 0.0f;
#pragma unroll
      for (int i = 0; i < kVals; ++i) {
        const int ci = ci_of(i);
        const float pv = ptx::ex2_approx_ftz_f32(st[i] * scale_log2 - step[ci].scaled);
        sum[ci] += pv;
        const uint32_t at = p_tile + swizzled(col_of(ci), 2 * (tok_a + 8 * ((i / 2) % 2)));
        asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(at), "h"(bits16<T>(pv)) : "memory");
      }
#pragma unroll
      for (int ci = 0; ci < kCols; ++ci) l[ci] = l[ci] * step[ci].alpha + sum[ci];
      if (valid < kBlockN) zero_v_rows_all(kv_stage, valid, t);
      cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // P^T and zeros, for wgmma
      wg_sync.sync();  // (also: every thread has read col_max)
      trace(wg, 4);

      // O^T *= alpha (only where some column's max moved); O^T += V^T P^T.
      if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int i = 0; i < kVals; ++i) o[mt][i] *= step[ci_of(i)].alpha;
        }
      }
      const uint64_t v_desc = smem_desc_sw128(kv_stage, kChunkBytes, 1024);
      const uint64_t p_desc = smem_desc_sw128(p_tile, 0, 1024);
      // One group per 64 output columns (V chunk mt), each chunk released as its group finishes.
      wgmma_fence();
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk) {
          wgmma_m64nNk16<T, kN, 1>(o[mt], desc_advance(v_desc, mt * kChunkBytes + kk * 16 * 128),
                                   desc_advance(p_desc, kk * 32), 1);
        }
        wgmma_commit_group();
      }
      release_in_order(sm.chunk_empty[stage], t, std::make_integer_sequence<int, kMTiles>{});
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) fence_accumulators(o[mt]);
      trace(wg, 5);
    }
    n_block += static_cast<uint32_t>(n_blocks);
    if (wg == 0 && t == 0) {
      grid_stamp(3);
    }

    // Epilogue: each column's LSE and factor, then the rows.
    float factor[kCols];
    narrow_column_factors<kN>(p, sm, c, row0, m, l, scale_log2, /*lse_shift_log2=*/0.0f,
                              /*v_scale=*/1.0f, factor);
    const bool merged = c.slot == plan::kSlotCluster;  // left over the stages for the cluster

    // The rows, 16 at a time: warpgroup 0 stores its share, warpgroup 1 adds its own, then all
    // write them out (or, merged, they stay over the stages: both warpgroups are past their
    // last P V and every copy has landed).
    float* rows_buf = merged ? reinterpret_cast<float*>(s.kv) : s.exchange;
    // (q as a constant: with a loop over q the compiler left o in local memory.)
    const auto pass = [&](auto q_constant) {
      constexpr int q = decltype(q_constant)::value;
      const int row_off = merged ? 0 : q * kNarrowPassRows;
#pragma unroll
      for (int w = 0; w < 2; ++w) {
        if (wg == w) {
#pragma unroll
          for (int i = 8 * q; i < 8 * q + 8; ++i) {
            const int ci = ci_of(i);
            float* x = rows_buf + (col_of(ci) - row_off) * kMergeStride + tok_a + 8 * ((i / 2) % 2);
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
              const float v = o[mt][i] * factor[ci];
              x[64 * mt] = w == 0 ? v : x[64 * mt] + v;
            }
          }
        }
        consumer_sync(kEpilogueBarrier);
        if (q == 0 && tid == 0) grid_stamp(8 + w);
      }
      if (merged) return;
      narrow_store_rows<T>(p, c, rows_buf, row0, row_off);
      if (q == 0 && tid == 0) grid_stamp(10);
    };
    pass(std::integral_constant<int, 0>{});
    if constexpr (kN > kNarrowPassRows) pass(std::integral_constant<int, 1>{});
  }
  if (tid == 0) grid_stamp(4);
}

#endif  // MLAKIT_SM90_WGMMA

}  // namespace mlakit::sm90
