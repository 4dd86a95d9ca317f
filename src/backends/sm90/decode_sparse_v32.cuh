// The sm90 sparse decode kernel of the V3.2 blockwise cache (656 bytes a token) with a 16-bit q:
// a kernel of its own, beside the dense kernels' gather (gather.cuh), for the 64-row tile
// (docs/sparse-decode.md, "The split kernel"). Four warpgroups with fixed roles:
//  - producer (two warpgroups, 80 registers): each thread holds its share of one token of the
//    next block in registers (loaded before the block's stage is free), then, once the stage
//    comes back, widens it to q's type and stores it into the stage in the 128-byte swizzle the
//    wgmmas read; then loads the block after, its slots two blocks ahead and the rows of the
//    block after that into L2.
//  - S warpgroup (192): per block S = Q K^T (m64n64k16 x 36), the mask, the online softmax, P over
//    the stage's RoPE chunk (free once S is done) with the block's row max, then O[:, 0:256] += P
//    V (P from registers).
//  - V warpgroup (160): per block O[:, 256:512] += P V (P from shared memory), rescaled by the
//    factor it derives from the published max (max_step, the same inputs as the S warpgroup's).
// Stages: the wide tile's two 72 KB stages (Layout<kRows>); a stage goes back when both consumer
// warpgroups' P V of it are done. Schedules: persistent and one-shot (the chunk iterator), the
// wide tile's epilogue (write_wide_chunk) and combine; or the cluster schedule (tactic 12, an
// instantiation of its own): the indices read as given, each checked as the producer reads it
// (one out of range: zeros, marked in the stage's bad_tokens and masked), the S results of a
// cluster merged by the S warpgroups (sparse_entry.cuh). Tokens past a chunk's count are stored
// as zeros (never read) and masked. Trace builds (trace.cuh) stamp, in CTA 0: role 0 (S warpgroup)
// 0 a block's loop entry, 1 its stage seen full, 3 S done, 4 P published, 5 P V done; role 1 (V
// warpgroup) 0, 7 P seen, 5; role 2 (producer warp 0) 8 the stage seen free, 12 the block stored;
// the grid timeline 0 entry, 1 past the setup, 2 the first block seen full, 3 the S warpgroup's
// last block done, 4 its epilogue issued, 5 exit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cuda/ptx>

#include "backends/sm90/config.h"
#include "backends/sm90/device.cuh"
#include "backends/sm90/gather.cuh"
#include "backends/sm90/launch.h"
#include "backends/sm90/params.h"
#include "backends/sm90/sparse_entry.cuh"
#include "backends/sm90/trace.cuh"
#include "backends/sm90/wgmma.cuh"
#include "backends/sm90/wide_epilogue.cuh"
#include "kernels/common/fp8.cuh"
#include "kernels/common/ptx.h"
#include "plan/compact.h"
#include "plan/work.cuh"

namespace mlakit::sm90 {

// Registers after setmaxnreg of the S and V warpgroups and the producer (the CTA's shape:
// kSparseThreads, sparse_entry.cuh).
inline constexpr int kSplitSRegisters = 192;
inline constexpr int kSplitVRegisters = 160;
inline constexpr int kSplitProducerRegisters = 80;
static_assert(fits_sparse_launch(kSplitSRegisters, kSplitVRegisters, kSplitProducerRegisters));

#ifdef MLAKIT_SM90_WGMMA

// 16 bytes from global memory through the non-coherent path, not kept in L1 (each token is read
// once per CTA), with a 256-byte L2 fetch.
__device__ __forceinline__ uint4 ld_stream_v4(const uint8_t* a) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(a));
  return v;
}

// Columns 128 h .. 128 h + 127 of an N 256 accumulator (the same fragment order).
__device__ __forceinline__ float (&half_of(float (&o)[128], int h))[64] {
  return *reinterpret_cast<float(*)[64]>(o + 64 * h);
}

// A producer thread's share of one token: quarter u (0..3) of its 512 e4m3 values (16 bytes at
// 64d + 16u, d = 0..7, scale group d / 2), its four scales, and the 16-byte pieces u and u + 4 of
// its 64 bf16 RoPE values.
struct SplitToken {
  uint4 nope[8];
  uint4 scales;  // four fp32
  uint4 rope[2];
};

__device__ __forceinline__ void load_token(const DecodeParams& p, int32_t slot, int u,
                                           SplitToken& x) {
  if (slot < 0) {
#pragma unroll
    for (int d = 0; d < 8; ++d) x.nope[d] = make_uint4(0, 0, 0, 0);
    x.scales = make_uint4(0, 0, 0, 0);
    x.rope[0] = x.rope[1] = make_uint4(0, 0, 0, 0);
    return;
  }
  const uint8_t* tok = p.kv_cache + int64_t{slot} * p.kv_view.stride_page;
#pragma unroll
  for (int d = 0; d < 8; ++d) x.nope[d] = ld_stream_v4(tok + 64 * d + 16 * u);
  x.scales = ld_stream_v4(tok + kDv);
  constexpr int kRope = kDv + kDv / kBlockwiseGroup * 4;
  x.rope[0] = ld_stream_v4(tok + kRope + 16 * u);
  x.rope[1] = ld_stream_v4(tok + kRope + 64 + 16 * u);
}

// Token tk of the stage at `stage` from a thread's share: column chunk d's 16-byte pieces 2u and
// 2u + 1 (16 values widened), the RoPE chunk's pieces u and u + 4 (as they are for a bf16 q).
// With a bf16 q the whole warp takes the exact power-of-two widening when every scale it holds
// allows it (a uniform branch: per value, ptxas computed both widenings and selected).
template <typename T>
__device__ __forceinline__ void store_token(uint32_t stage, int tk, int u, const SplitToken& x,
                                            float k_scale) {
  const float scales[4] = {
      __uint_as_float(x.scales.x) * k_scale, __uint_as_float(x.scales.y) * k_scale,
      __uint_as_float(x.scales.z) * k_scale, __uint_as_float(x.scales.w) * k_scale};
  bool pow2 = true;
#pragma unroll
  for (int g = 0; g < 4; ++g) pow2 = pow2 && pow2_scale(scales[g]);
  auto put = [&](int d, const uint32_t(&w)[8]) {
    const uint32_t at = stage + d * kChunkBytes;
    st_shared_v4(at + swizzled(tk, u * 32), w[0], w[1], w[2], w[3]);
    st_shared_v4(at + swizzled(tk, u * 32 + 16), w[4], w[5], w[6], w[7]);
  };
  if (std::is_same_v<T, __nv_bfloat16> && __all_sync(0xffffffffu, pow2)) {
#pragma unroll
    for (int d = 0; d < 8; ++d) {
      uint32_t w[8];
      dequant16_pow2(x.nope[d], scales[d / 2], w);
      put(d, w);
    }
  } else {
#pragma unroll
    for (int d = 0; d < 8; ++d) {
      uint32_t w[8];
      dequant16_any<T>(x.nope[d], scales[d / 2], w);
      put(d, w);
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t w[4] = {x.rope[h].x, x.rope[h].y, x.rope[h].z, x.rope[h].w};
    if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
        w[i] = pack2<__half>(f.x, f.y);
      }
    }
    st_shared_v4(stage + kPChunk * kChunkBytes + swizzled(tk, 16 * u + 64 * h), w[0], w[1], w[2],
                 w[3]);
  }
}

// The producer (threads 256..511). Thread t of it holds quarter u = lane / 8 of token
// 8 (t / 32) + lane % 8 of each block: per warp store instruction 8 tokens' same piece,
// conflict-free in the swizzle. Walks the same chunks as the consumers; block by block: wait for
// the stage, widen and store the held block, arrive on the stage's barrier (256 arrivals), then
// load the next block of the chunk. (With one warpgroup holding two tokens a thread, h_q 64 and
// 128 at batch 128 took 6-7% longer on the H200, 2026-11-28.) The slots run two blocks ahead of the
// loads and the rows of the block after the next go into L2 meanwhile, so that neither load waits
// for another. A chunk starts with its first block's slots and loads, then (producer warp 0) its Q
// tile, which waits until the S warpgroup is done with the previous one. One call site each for
// the chunk walk and the loads (the producer's code is fetched beside the consumers').
template <typename T, bool kCluster>
__device__ __forceinline__ void produce_split(const DecodeParams& p, const Smem& s, int m_tile,
                                              int32_t cta) {
  using L = Layout<kRows>;
  const int t = static_cast<int>(threadIdx.x) - kConsumerThreads;
  const int warp = __shfl_sync(0xffffffffu, t / 32, 0);
  const int lane = t % 32;
  const int u = lane / 8;
  const int tk = warp * 8 + lane % 8;
  SmallStorage& sm = *s.small;
  const uint32_t kv_addr = ptx::smem_u32(s.kv);
  const float k_scale = fp8::read_scales(p).v;
  const int32_t row0 = m_tile * kRows;
  auto chunks = sparse_chunks<kCluster>(p, sm, cta);
  plan::Chunk c{};
  uint32_t n_chunk = 0, n_block = 0;
  SplitToken x;
  bool held_bad = false;  // kCluster: the held token has no index to read (masked)
  // The entry of token tk of the block at tok0 (-1 past the chunk's end): its slot, or
  // (kCluster) the index as given, which to_slot turns into a slot. sl3 keeps the entry as loaded
  // until its block is next but one, so that the load is not waited for at once (the range check
  // and division of direct_slot stalled the producer a global load's latency a block).
  auto slot_at = [&](int32_t tok0) {
    const int32_t* table = p.block_table + int64_t{c.request} * p.block_table_stride;
    const int32_t tok = tok0 + tk;
    return tok < c.token_end ? table[tok] : -1;
  };
  auto to_slot = [&](int32_t entry) {
    if constexpr (kCluster) {
      return direct_slot(p, entry);  // indices as given, or compacted slots
    } else {
      return entry;
    }
  };
  auto prefetch = [&](int32_t sl) {
    if (u == 0 && sl >= 0) {
      prefetch_l2(p.kv_cache + int64_t{sl} * p.kv_view.stride_page, kBlockwiseBytes);
    }
  };
  // sl1: the slots of the block to load next; sl2, sl3: of the two after it, sl3 as loaded (its
  // rows are prefetched into L2 as sl1's are loaded: two blocks of the producer's time ahead).
  int32_t tok0 = 0, sl1 = -1, sl2 = -1, sl3 = -1;
  bool load = false;  // the block at tok0 is to be loaded
  while (true) {
    if (load) {
      held_bad = sl1 < 0;
      load_token(p, sl1, u, x);
      load = false;
      const int32_t s3 = to_slot(sl3);
      prefetch(s3);
      sl1 = sl2;
      sl2 = s3;
      sl3 = slot_at(tok0 + 3 * kBlockN);
      continue;
    }
    if (tok0 >= c.token_end) {
      if (!chunks.next(&c)) return;
      // The slots first (nothing waits on them yet), then the Q tile, then the first loads.
      tok0 = c.token_begin;
      sl1 = to_slot(slot_at(tok0));
      sl2 = to_slot(slot_at(tok0 + kBlockN));
      sl3 = slot_at(tok0 + 2 * kBlockN);
      if (warp == 0) issue_q<L, kRows>(p, s, c, row0, n_chunk, lane);
      ++n_chunk;
      if (tok0 < c.token_end) {
        prefetch(sl2);
        load = true;
      }
      continue;
    }
    const uint32_t stage = n_block % kStages, phase = (n_block / kStages) & 1;
    const uint32_t stage_addr = kv_addr + stage * kTileBytes;
    wait_parity(&sm.empty[stage], phase ^ 1);
    if (warp == 0) trace(2, 8);
    store_token<T>(stage_addr, tk, u, x, k_scale);
    if constexpr (kCluster) {
      // The block's masked tokens (bit j: token j), a byte per warp: lanes 0..7 hold its tokens.
      const uint32_t bad = __ballot_sync(0xffffffffu, held_bad);
      if (lane == 0) reinterpret_cast<uint8_t*>(&sm.bad_tokens[stage])[warp] = bad & 0xffu;
    }
    cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // read by wgmma
    arrive(&sm.full[stage][0]);
    if (warp == 0) trace(2, 12);
    ++n_block;
    tok0 += kBlockN;
    load = tok0 < c.token_end;
  }
}

// The S warpgroup (threads 0..127): S, softmax, P published over the stage's RoPE chunk with the
// block's row max (SmallStorage::row_max[stage]), its half of O from P in registers.
template <typename T, bool kCluster>
__device__ __forceinline__ void consume_split_s(const DecodeParams& p, const Smem& s, int m_tile,
                                                int32_t cta) {
  const int t = static_cast<int>(threadIdx.x);
  const int lane = t % 32;
  const int row_a = (t / 32) * 16 + lane / 4;
  SmallStorage& sm = *s.small;
  const uint32_t kv_addr = ptx::smem_u32(s.kv);
  const uint64_t q_desc = smem_desc_sw128(ptx::smem_u32(s.q), 0, 1024);
  const int32_t row0 = m_tile * kRows;
  const float scale_log2 = p.scale_log2;
  auto chunks = sparse_chunks<kCluster>(p, sm, cta);
  plan::Chunk c;
  uint32_t n_chunk = 0, n_block = 0;
  while (chunks.next(&c)) {
    const int32_t limit[2] = {visible_limit(p, c, row0 + row_a),
                              visible_limit(p, c, row0 + row_a + 8)};
    const int32_t n_blocks = (c.token_end - c.token_begin + kBlockN - 1) / kBlockN;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    const uint32_t chunk_parity = n_chunk & 1;
    wait_parity(&sm.q_full, chunk_parity);
    ++n_chunk;
    if (n_blocks == 0 && t == 0) arrive(&sm.q_empty);
#pragma unroll 1
    for (int32_t b = 0; b < n_blocks; ++b, ++n_block) {
      const int32_t tok0 = c.token_begin + b * kBlockN;
      const uint32_t stage = n_block % kStages, phase = (n_block / kStages) & 1;
      const uint32_t kv_stage = kv_addr + stage * kTileBytes;
      const uint32_t p_tile = kv_stage + kPChunk * kChunkBytes;
      const uint64_t kv_desc = smem_desc_sw128(kv_stage, 0, 1024);
      const uint64_t v_desc = smem_desc_sw128(kv_stage, kChunkBytes, 1024);
      trace(0, 0);
      wait_parity(&sm.full[stage][0], phase);
      trace(0, 1);
      if (n_block == 0 && t == 0) grid_stamp(2);
      // kCluster: tokens without an index to read (the producer's bad_tokens, page_mask.cuh). A
      // block of none (a -1 tail past a short row's context) changes nothing: skipped by both
      // warpgroups, its barriers kept (published still arrives, so its phases stay in step).
      uint64_t bad = 0;
      if constexpr (kCluster) {
        bad = ptx::ld_shared_u64_here(ptx::smem_u32(&sm.bad_tokens[stage]));
        if (bad == ~uint64_t{0}) {
          if (b == n_blocks - 1 && t == 0) arrive(&sm.q_empty);
          arrive(&sm.published[stage]);
          if (t == 0) arrive(&sm.empty[stage]);
          continue;
        }
      }
      float sc[32];
      wgmma_fence();
#pragma unroll
      for (int j = 0; j < kQkChunks; ++j) {
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
      trace(0, 3);
      if (b == n_blocks - 1 && t == 0) arrive(&sm.q_empty);
      if (tok0 + kBlockN > min(limit[0], limit[1]) || bad != 0) {
        const int32_t j_base = 2 * (lane % 4);
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const int32_t j = j_base + 8 * (i / 4) + (i % 2);
          if (tok0 + j >= limit[(i / 2) % 2] || plan::bad_token(bad, j)) sc[i] = -INFINITY;
        }
      }
      MaxStep step[2];
      uint32_t pr[16];
      softmax_to_p<T>(sc, m, l, step, pr, sm.row_max[stage], p_tile, scale_log2, row_a, lane);
      cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // P, for the V warpgroup's wgmma
      arrive(&sm.published[stage]);
      trace(0, 4);
      rescale(o, step);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        const uint32_t a[4] = {pr[4 * kk], pr[4 * kk + 1], pr[4 * kk + 2], pr[4 * kk + 3]};
        // Two N 128 halves: an N 256 instruction's 128 accumulators do not fit the 128 registers
        // a thread of a 512-thread CTA starts with (ptxas checks each instruction against it).
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          wgmma_m64n128k16_rs_tb<T>(half_of(o, h), a,
                                    desc_advance(v_desc, h * 2 * kChunkBytes + kk * 16 * 128), 1);
        }
      }
      wgmma_commit_group();
      wgmma_wait_group<0>();
      fence_accumulators(o);
      trace(0, 5);
      if (t == 0) arrive(&sm.empty[stage]);
    }
    if (t == 0) grid_stamp(3);
    write_wide_chunk<T, 0>(p, s, c, row0, m, l, o, scale_log2, /*lse_shift_log2=*/0.0f, 1.0f,
                           chunk_parity);
    if (t == 0) grid_stamp(4);
  }
}

// The V warpgroup (threads 128..255): its half of O from the published P and max.
template <typename T, bool kCluster>
__device__ __forceinline__ void consume_split_v(const DecodeParams& p, const Smem& s, int m_tile,
                                                int32_t cta) {
  const int t = static_cast<int>(threadIdx.x) - 128;
  const int lane = t % 32;
  const int row_a = (t / 32) * 16 + lane / 4;
  SmallStorage& sm = *s.small;
  const uint32_t kv_addr = ptx::smem_u32(s.kv);
  const int32_t row0 = m_tile * kRows;
  const float scale_log2 = p.scale_log2;
  auto chunks = sparse_chunks<kCluster>(p, sm, cta);
  plan::Chunk c;
  uint32_t n_chunk = 0, n_block = 0;
  while (chunks.next(&c)) {
    const int32_t n_blocks = (c.token_end - c.token_begin + kBlockN - 1) / kBlockN;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    const uint32_t chunk_parity = n_chunk & 1;
    ++n_chunk;
    if (t == 0) arrive(&sm.q_empty);  // this warpgroup never reads Q
#pragma unroll 1
    for (int32_t b = 0; b < n_blocks; ++b, ++n_block) {
      const uint32_t stage = n_block % kStages, phase = (n_block / kStages) & 1;
      const uint32_t kv_stage = kv_addr + stage * kTileBytes;
      const uint64_t v_desc =
          smem_desc_sw128(kv_stage + kVChunksPerWarpgroup * kChunkBytes, kChunkBytes, 1024);
      const uint64_t p_desc = smem_desc_sw128(kv_stage + kPChunk * kChunkBytes, 0, 1024);
      trace(1, 0);
      wait_parity(&sm.full[stage][0], phase);
      if constexpr (kCluster) {
        // A block without one index to read: skipped, as by the S warpgroup (its published
        // phase completes without this warpgroup waiting for it).
        if (ptx::ld_shared_u64_here(ptx::smem_u32(&sm.bad_tokens[stage])) == ~uint64_t{0}) {
          if (t == 0) arrive(&sm.empty[stage]);
          continue;
        }
      }
      wait_parity(&sm.published[stage], phase);
      trace(1, 7);
      MaxStep step[2];
#pragma unroll
      for (int e = 0; e < 2; ++e)
        step[e] = max_step(m[e], sm.row_max[stage][row_a + 8 * e], scale_log2);
      rescale(o, step);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          wgmma_m64n128k16_tb<T>(half_of(o, h), desc_advance(p_desc, kk * 32),
                                 desc_advance(v_desc, h * 2 * kChunkBytes + kk * 16 * 128), 1);
        }
      }
      wgmma_commit_group();
      wgmma_wait_group<0>();
      fence_accumulators(o);
      trace(1, 5);
      if (t == 0) arrive(&sm.empty[stage]);
    }
    write_wide_chunk<T, 1>(p, s, c, row0, m, l, o, scale_log2, /*lse_shift_log2=*/0.0f, 1.0f,
                           chunk_parity);
  }
}

#endif  // MLAKIT_SM90_WGMMA

// T: q's type and out's (bf16 or fp16). Schedules persistent and one-shot, or (kCluster) the
// cluster schedule alone: an instantiation of its own, so that the merge's code leaves the other
// two as they were (in one kernel it moved ptxas's register allocation of the producer, 124 bytes
// of spills instead of 60, and tactics 6 and 7 ran ~10% slower on the H200).
template <typename T, bool kCluster>
__global__ void __launch_bounds__(kSparseThreads, 1)
    sparse_v32_kernel(const __grid_constant__ DecodeParams p) {
  using L = Layout<kRows>;
#ifdef MLAKIT_SM90_WGMMA
  extern __shared__ uint8_t smem_raw[];
  uint8_t* base = aligned_smem(smem_raw);
  const Smem s{.q = base + L::kQOffset,
               .kv = base + L::kKvOffset,
               .exchange = reinterpret_cast<float*>(base + L::kExchangeOffset),
               .small = reinterpret_cast<SmallStorage*>(base + L::kSmallOffset)};
  SmallStorage& sm = *s.small;
  const int32_t m_tiles = (p.rows + kRows - 1) / kRows;
  const SparseCta at = sparse_cta<kCluster>(p, m_tiles);
  const int m_tile = at.m_tile;
  const int32_t cta = at.cta;
  if (threadIdx.x == 0) grid_stamp(0);
  if (threadIdx.x == 0) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(&p.q_map) : "memory");
    for (int i = 0; i < kStages; ++i) {
      cuda::ptx::mbarrier_init(&sm.full[i][0], kSparseProducerThreads);
      cuda::ptx::mbarrier_init(&sm.empty[i], 2);
      cuda::ptx::mbarrier_init(&sm.published[i], 128);
    }
    cuda::ptx::mbarrier_init(&sm.q_full, 1);
    cuda::ptx::mbarrier_init(&sm.q_empty, 2);
    trace_reset();
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
  }
  sparse_prologue<kCluster>(p, sm, at);
  if (threadIdx.x >= kConsumerThreads) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kSplitProducerRegisters));
    produce_split<T, kCluster>(p, s, m_tile, cta);
    if (kCluster && p.plan.cluster_size > 1) merge_sparse_cluster<T, L, kRows, 128>(p, false);
  } else if (threadIdx.x >= 128) {
    // 512 threads start with 128 registers: the V warpgroup's 160 are an increase.
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kSplitVRegisters));
    consume_split_v<T, kCluster>(p, s, m_tile, cta);
    if (kCluster && p.plan.cluster_size > 1) merge_sparse_cluster<T, L, kRows, 128>(p, false);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kSplitSRegisters));
    consume_split_s<T, kCluster>(p, s, m_tile, cta);
    if (kCluster && p.plan.cluster_size > 1) merge_sparse_cluster<T, L, kRows, 128>(p, true);
  }
  if (threadIdx.x == 0) grid_stamp(5);
  trace_finish();
#endif
}

template <typename T, bool kCluster>
const DecodeKernel& sparse_v32_kernel_entry() {
  return SparseEntry<sparse_v32_kernel<T, kCluster>, Layout<kRows>::kSmemBytes, kSparseThreads,
                     kCluster>::entry();
}

}  // namespace mlakit::sm90
