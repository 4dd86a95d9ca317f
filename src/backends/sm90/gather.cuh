// The sm90 decode kernel's producer for sparse decode: instead of TMA copies of whole pages, the
// producer warpgroup's 128 threads gather single tokens, named by the compacted slots of
// plan/compact.h, into the same stages and the same 128-byte swizzle as the TMA would, and
// complete each column chunk's barrier by arriving (128 arrivals, no byte count). A sparse row is
// a request of one query token whose tokens are its slots; the consumers are the dense ones.
//  - 16-bit cache (Fill::kGather16): cp.async of 16-byte pieces into place, 8 threads per 128-byte
//    chunk row; a piece past the row's count is zero-filled without a read.
//  - V3.2 blockwise cache (Fill::kGatherV32, 656 bytes a token): every byte of the block requested
//    at once by cp.async (the e4m3 values into the stage's last column chunks, the bf16 RoPE
//    values into their place, the scales into SmallStorage); the consumer warpgroup that owns the
//    block widens it in place (dequant_v32) before its first product: its registers and its
//    warps, not the producer's 40 registers, run the conversion, while the other warpgroup
//    computes.
//  - V4 cache (Fill::kGatherV4, 576 data bytes a token, its 8 scale bytes after the page's data):
//    as V3.2, the 448 e4m3 values into column chunks 3..6, the bf16 RoPE values into column chunk 7
//    (V includes them), the seven UE8M0 scales into SmallStorage; widened by dequant_v4. d_qk is
//    512: q's ninth column chunk is zeros (its tensor map is 512 wide) and so is K's (the widening
//    writes it), so S is that of the 512 columns. A slot's page and token come by a shift
//    (DecodeParams::v4); a slot tagged plan::kExtraSlot is the extra cache's.
// The producer runs one block ahead (the next block's copies are requested before the block's
// barriers complete), reads the slots a block before it needs them and prefetches the rows into
// L2 a block before it requests them. The cache may be a view with padded tokens: slot s lies at
// s * kv_view.stride_page (the token stride). Padded pages whose stride is a whole number of
// token strides are read the same way: the compaction spaces the slots by that page pitch
// (plan::CompactParams::page_pitch), since a division per copy in the gather cost the V3.2 sparse
// decode 20-33% (H200); launch.cc refuses other padded pages.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cuda/ptx>

#include "backends/sm90/config.h"
#include "backends/sm90/device.cuh"
#include "backends/sm90/params.h"
#include "kernels/common/fp8.cuh"
#include "kernels/common/ptx.h"
#include "plan/compact.h"
#include "plan/work.cuh"

namespace mlakit::sm90 {

#ifdef MLAKIT_SM90_WGMMA

inline constexpr int kGatherThreads = 128;  // the producer warpgroup
inline constexpr int kRow16Bytes = kDqk * 2;

// The Q tile of a chunk: lane 0 of the producer's first warp waits for q_empty and sets the byte
// count, lane j < 9 copies column chunk j.
template <typename L, int kTileRows>
__device__ __forceinline__ void issue_q(const DecodeParams& p, const Smem& s, const plan::Chunk& c,
                                        int32_t row0, uint32_t n_chunk, int lane) {
  SmallStorage& sm = *s.small;
  if (lane == 0) {
    wait_parity(&sm.q_empty, (n_chunk & 1) ^ 1);
    (void)cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta,
                                               cuda::ptx::space_shared, &sm.q_full, L::kQBytes);
  }
  __syncwarp();
  // Lane j loads column chunk j: 9 chunks, or 18 for a split q (Fp8QSplitLayout: the high parts'
  // 9 then the residuals', columns 576.. of the packed rows).
  constexpr int kQBoxes = L::kQBytes / L::kQChunkBytes;
  static_assert(kQBoxes == kQkChunks || kQBoxes == 2 * kQkChunks);
  if (lane < kQBoxes) {
    int32_t q_row = c.request * p.rows + row0;
    if (p.q_in_place != 0) {
      // var_q, q read where it lies: every tile is wholly live or wholly past q_len (launch.cc).
      // A tile past it (the persistent schedule runs those) gets a box wholly out of the map's
      // bounds: zeros, no byte of q read, the full byte count all the same.
      const plan::RowView& v = p.out_view;
      int32_t i, t0;
      v.request_token(c.request, &i, &t0);
      q_row = row0 < v.live_rows(c.request, p.rows) ? (v.cu_seqlens_q[i] + t0) * v.h_q + row0
                                                    : -kTileRows;
    }
    tma_load_2d(s.q + lane * L::kQChunkBytes, &p.q_map, lane * kChunkElems, q_row, &sm.q_full);
  }
}

// cp.async.bulk.prefetch.L2.global [a], bytes (sm_90): bytes a multiple of 16.
__device__ __forceinline__ void prefetch_l2(const void* a, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(a), "r"(bytes) : "memory");
}

// Token tk's slot (-1: none) of the block: lane k % 32 of every warp holds token k's in
// s[k / 32]; tk / 32 is the same across the warp.
__device__ __forceinline__ int32_t slot_of(const int32_t (&s)[2], int tk) {
  return __shfl_sync(0xffffffffu, tk < 32 ? s[0] : s[1], tk & 31);
}

// 16 e4m3 values times a power-of-two `scale` in [2^-120, 2^7] as 16 bf16 in 8 registers: the
// exact widening of fp8.cuh with its factor 2^120 times the scale, one bf16 multiply per two
// values.
__device__ __forceinline__ void dequant16_pow2(const uint4& v, float scale, uint32_t (&out)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  const float f = scale * 0x1.0p120f;
  const __nv_bfloat162 factor = __floats2bfloat162_rn(f, f);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Values 2h, 2h + 1 of word i in bytes 1 and 3.
      const uint32_t y = fp8::prmt(w[i], w[i], h == 0 ? 0x1000 : 0x3020);
      const uint32_t b = ((y >> 4) & 0x07f007f0u) | (y & 0x80008000u);
      const __nv_bfloat162 x = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&b), factor);
      out[2 * i + h] = *reinterpret_cast<const uint32_t*>(&x);
    }
  }
}

// Whether dequant16_pow2 takes `scale` (DeepSeek's quantizers round scales to powers of two).
__device__ __forceinline__ bool pow2_scale(float scale) {
  return (__float_as_uint(scale) & 0x007fffffu) == 0 && scale >= 0x1.0p-120f && scale <= 128.0f;
}

// 16 e4m3 values times any `scale` as 16 T in 8 registers, through fp32: one rounding.
template <typename T>
__device__ __forceinline__ void dequant16_any(const uint4& v, float scale, uint32_t (&out)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) fp8::dequant4<T>(w[i], scale, out[2 * i], out[2 * i + 1]);
}

// 16 e4m3 values times `scale` as 16 T in 8 registers: dequant16_pow2 for bf16 where it applies,
// else dequant16_any.
template <typename T>
__device__ __forceinline__ void dequant16(const uint4& v, float scale, uint32_t (&out)[8]) {
  if (std::is_same_v<T, __nv_bfloat16> && pow2_scale(scale)) {
    dequant16_pow2(v, scale, out);
    return;
  }
  dequant16_any<T>(v, scale, out);
}

__device__ __forceinline__ void st_shared_v4(uint32_t a, uint32_t x, uint32_t y, uint32_t z,
                                             uint32_t w) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(x), "r"(y), "r"(z), "r"(w)
               : "memory");
}

__device__ __forceinline__ void ld_shared_v4(uint32_t a, uint32_t (&w)[4]) {
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
               : "r"(a));
}

// A block's stage: which, its phase and its shared-memory address.
struct StageRef {
  uint32_t stage, phase, addr;
};

template <typename L>
__device__ __forceinline__ StageRef stage_ref(uint32_t kv_smem, uint32_t n_block) {
  const uint32_t stage = n_block % L::kStages;
  return {stage, (n_block / L::kStages) & 1, kv_smem + stage * L::kStageBytes};
}

// ---- 16-bit cache (Fill::kGather16) -----------------------------------------------------------

// Requests a block in one cp.async group: thread t copies the 16-byte piece t % 8 of rows
// t / 8 + 16k of every column chunk, token by token.
template <typename L>
__device__ __forceinline__ void issue16(const DecodeParams& p, SmallStorage& sm, const StageRef& r,
                                        const int32_t (&s)[2], int t) {
  if constexpr (!L::kReleasePerChunk) wait_parity(&sm.empty[r.stage], r.phase ^ 1);
  if constexpr (L::kReleasePerChunk) {
#pragma unroll 1
    for (int j = 0; j < kQkChunks; ++j) wait_parity(&sm.chunk_empty[r.stage][j], r.phase ^ 1);
  }
  const int u = t % 8;
#pragma unroll 1
  for (int k = 0; k < 4; ++k) {
    const int tk = t / 8 + 16 * k;
    const int32_t sl = slot_of(s, tk);
    const uint8_t* src = p.kv_cache + int64_t{max(sl, 0)} * p.kv_view.stride_page + u * 16;
    const uint32_t dst = r.addr + swizzled(tk, u * 16);
#pragma unroll
    for (int j = 0; j < kQkChunks; ++j) {
      ptx::cp_async_cg_shared_global(dst + j * L::kKvChunkBytes, src + j * 128, sl >= 0 ? 16 : 0);
    }
  }
  ptx::cp_async_commit_group();
}

// ---- V3.2 blockwise cache (Fill::kGatherV32) ---------------------------------------------------

// Where raw e4m3 chunk j (64 bytes of each of the block's 64 tokens, token-major) waits in the
// stage: in the column chunks 4..7 that are written last, two raw chunks in each, so that column
// chunk j >= 4 is written only after raw chunks 2(j - 4) and 2(j - 4) + 1 (both <= j) were read.
template <typename L>
__device__ __forceinline__ uint32_t raw_chunk(uint32_t stage_addr, int j) {
  return stage_addr + (4 + j / 2) * L::kKvChunkBytes + (j % 2) * (L::kKvChunkBytes / 2);
}
static_assert(kDv / 64 == 8 && kBlockN * 64 * 2 == kChunkBytes, "two raw chunks per column chunk");

// Requests a block, all of its bytes at once in one cp.async group (no registers held): the 512
// e4m3 values of each token into raw_chunk (warp w copies tokens w + 4i, one 512-byte row per
// instruction), the bf16 RoPE values into their place in column chunk 8, the four scales into
// SmallStorage::gather_scale.
template <typename L>
__device__ __forceinline__ void issue_v32(const DecodeParams& p, SmallStorage& sm,
                                          const StageRef& r, const int32_t (&s)[2], int t) {
  if constexpr (!L::kReleasePerChunk) wait_parity(&sm.empty[r.stage], r.phase ^ 1);
  if constexpr (L::kReleasePerChunk) {
#pragma unroll
    for (int j = 4; j < kQkChunks; ++j) wait_parity(&sm.chunk_empty[r.stage][j], r.phase ^ 1);
  }
  const int piece = t % 32;
  const uint32_t dst = raw_chunk<L>(r.addr, piece / 4) + (piece % 4) * 16;
#pragma unroll 4
  for (int i = 0; i < kBlockN / 4; ++i) {
    const int tk = t / 32 + 4 * i;
    const int32_t sl = slot_of(s, tk);
    ptx::cp_async_cg_shared_global(
        dst + tk * 64, p.kv_cache + int64_t{max(sl, 0)} * p.kv_view.stride_page + piece * 16,
        sl >= 0 ? 16 : 0);
  }
  const int u = t % 8;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int tk = t / 8 + 16 * k;
    const int32_t sl = slot_of(s, tk);
    const uint8_t* src = p.kv_cache + int64_t{max(sl, 0)} * p.kv_view.stride_page + kDv +
                         kDv / kBlockwiseGroup * 4 + u * 16;
    ptx::cp_async_cg_shared_global(r.addr + kPChunk * L::kKvChunkBytes + swizzled(tk, u * 16), src,
                                   sl >= 0 ? 16 : 0);
  }
  if (t < kBlockN) {
    const int32_t sl = slot_of(s, t);
    ptx::cp_async_cg_shared_global(ptx::smem_u32(&sm.gather_scale[r.stage][t]),
                                   p.kv_cache + int64_t{max(sl, 0)} * p.kv_view.stride_page + kDv,
                                   sl >= 0 ? 16 : 0);
  }
  ptx::cp_async_commit_group();
}

// The producer's part of a block once its group landed (kLater: groups committed after it): the
// stage's barriers, all at once. A V3.2 block is then widened by the consumer warpgroup that owns
// it (dequant_v32) before its first product.
template <int kLater>
__device__ __forceinline__ void land_block(SmallStorage& sm, const StageRef& r) {
  ptx::cp_async_wait_group<kLater>();
  cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // copies read by wgmma
#pragma unroll
  for (int j = 0; j < kQkChunks; ++j) arrive(&sm.full[r.stage][j]);
}

// Each consumer warpgroup's 128 threads meet twice while they widen a block, on an mbarrier of
// their own (SmallStorage::dequant_sync, count 128) as WarpgroupSync does: with named barriers of
// 128 threads (bar.sync 4 + w) racecheck reported hazards between the warpgroups' epilogue
// accesses across the 256-thread epilogue barrier, as it had for the narrow tile. Two meetings a
// block: each block's first is at parity 0.
__device__ __forceinline__ void dequant_sync(SmallStorage& sm, int wg, uint32_t parity) {
  arrive(&sm.dequant_sync[wg]);
  wait_parity(&sm.dequant_sync[wg], parity);
}

// A consumer warpgroup widens the V3.2 block of its stage in place, once the stage's barriers
// say it landed: the RoPE chunk to fp16 for an fp16 q; then each column chunk j < 8: thread t
// the 16-byte piece t % 4 of raw chunk j of tokens t / 4 + 32k (k = 0, 1), times their group's
// scale, into two 16-byte pieces of its rows. Column chunk j >= 4 holds raw chunks that must be
// read first (raw_chunk); the four steps are read, meet, write. Ends with the writes ordered
// before the warpgroup's wgmma (and, through its later arrivals, the other warpgroup's).
template <typename L, typename T>
__device__ __forceinline__ void dequant_v32(SmallStorage& sm, uint32_t stage_addr, uint32_t stage,
                                            int t, int wg, float k_scale) {
  if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
    const int u8 = t % 8;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t at =
          stage_addr + kPChunk * L::kKvChunkBytes + swizzled(t / 8 + 16 * k, u8 * 16);
      uint32_t w[4];
      ld_shared_v4(at, w);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
        w[i] = pack2<__half>(f.x, f.y);
      }
      st_shared_v4(at, w[0], w[1], w[2], w[3]);
    }
  }
  const int u = t % 4;
  float4 g[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) g[k] = sm.gather_scale[stage][t / 4 + 32 * k];
  auto step = [&](int j, const uint32_t(&v)[2][4]) {
    const uint32_t at = stage_addr + j * L::kKvChunkBytes;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int tk = t / 4 + 32 * k;
      const float scale = (j / 2 == 0   ? g[k].x
                           : j / 2 == 1 ? g[k].y
                           : j / 2 == 2 ? g[k].z
                                        : g[k].w) *
                          k_scale;
      uint32_t w[8];
      dequant16<T>(make_uint4(v[k][0], v[k][1], v[k][2], v[k][3]), scale, w);
      st_shared_v4(at + swizzled(tk, u * 32), w[0], w[1], w[2], w[3]);
      st_shared_v4(at + swizzled(tk, u * 32 + 16), w[4], w[5], w[6], w[7]);
    }
  };
  auto load = [&](int j, uint32_t(&v)[2][4]) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      ld_shared_v4(raw_chunk<L>(stage_addr, j) + (t / 4 + 32 * k) * 64 + u * 16, v[k]);
    }
  };
  // Chunks 0..3: their raw in chunks 4 and 5, written later.
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t v[2][4];
    load(j, v);
    step(j, v);
  }
  // Chunks 4..7: raw 4..7 read first (chunks 6 and 7), then every raw chunk has been read.
  uint32_t v[4][2][4];
#pragma unroll
  for (int j = 0; j < 4; ++j) load(4 + j, v[j]);
  dequant_sync(sm, wg, 0);
#pragma unroll
  for (int j = 0; j < 4; ++j) step(4 + j, v[j]);
  cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);
  dequant_sync(sm, wg, 1);
}

// ---- V4 cache (Fill::kGatherV4) ---------------------------------------------------------------

inline constexpr int kV4Groups = kV4Nope / kV4Group;  // 7 raw chunks of 64 e4m3 values
static_assert(kV4Groups == 7 && kV4Nope + kDRope == kDv, "V4: 7 groups of 64, then the RoPE");

// Where V4's raw e4m3 chunk j (64 bytes of each of the block's 64 tokens, token-major) waits: two
// in each of column chunks 3..6, so that column chunk j >= 3 is written only after raw chunks
// 2(j - 3) and 2(j - 3) + 1 (both <= j) were read; column chunk 7 takes the RoPE values.
template <typename L>
__device__ __forceinline__ uint32_t raw_chunk_v4(uint32_t stage_addr, int j) {
  return stage_addr + (3 + j / 2) * L::kKvChunkBytes + (j % 2) * (L::kKvChunkBytes / 2);
}

// Token `slot`'s data row and scale row in its cache (main, or extra with plan::kExtraSlot).
struct V4Token {
  const uint8_t* data;
  const uint8_t* scales;
};
__device__ __forceinline__ V4Token v4_token(const DecodeParams& p, int32_t slot) {
  // Indexed, not selected: the two caches' fields stay in the parameter bank, not in the
  // producer's 40 registers.
  const GatherCache& c = p.v4[static_cast<uint32_t>(slot) >> 30];
  const int32_t s = slot & (plan::kExtraSlot - 1);
  const int32_t token = s & ((1 << c.page_shift) - 1);
  const uint8_t* page = c.base + int64_t{s >> c.page_shift} * c.page_stride;
  return {page + token * kV4DataBytes, page + c.scale_offset + token * kV4ScaleBytes};
}

// cp.async.ca.shared.global [dst], [src], 8, src_bytes (sm_80): 8 bytes or zeros.
__device__ __forceinline__ void cp_async_ca_8(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

// Requests a V4 block in one cp.async group: the 448 e4m3 values of each token into
// raw_chunk_v4 (warp w copies tokens w + 4i, lanes 0..27 a 16-byte piece each), the bf16 RoPE
// values into column chunk 7, the 8 scale bytes into SmallStorage::gather_scale.
template <typename L>
__device__ __forceinline__ void issue_v4(const DecodeParams& p, SmallStorage& sm, const StageRef& r,
                                         const int32_t (&s)[2], int t) {
  if constexpr (!L::kReleasePerChunk) wait_parity(&sm.empty[r.stage], r.phase ^ 1);
  if constexpr (L::kReleasePerChunk) {
#pragma unroll
    for (int j = 3; j < kQkChunks; ++j) wait_parity(&sm.chunk_empty[r.stage][j], r.phase ^ 1);
  }
  // Lane k works out the data rows of tokens k and 32 + k once (v4_token); each copy takes its
  // token's from that lane (three shuffles), not from v4_token again in every lane.
  const uint64_t row_a = reinterpret_cast<uint64_t>(v4_token(p, max(s[0], 0)).data);
  const uint64_t row_b = reinterpret_cast<uint64_t>(v4_token(p, max(s[1], 0)).data);
  const auto row_of = [&](int tk) {
    const uint64_t mine = tk < 32 ? row_a : row_b;
    const uint32_t lo = __shfl_sync(0xffffffffu, static_cast<uint32_t>(mine), tk & 31);
    const uint32_t hi = __shfl_sync(0xffffffffu, static_cast<uint32_t>(mine >> 32), tk & 31);
    return reinterpret_cast<const uint8_t*>((static_cast<uint64_t>(hi) << 32) | lo);
  };
  const int piece = t % 32;
  const uint32_t dst = raw_chunk_v4<L>(r.addr, piece / 4) + (piece % 4) * 16;
#pragma unroll 1
  for (int i = 0; i < kBlockN / 4; ++i) {
    const int tk = t / 32 + 4 * i;
    const int32_t sl = slot_of(s, tk);
    const uint8_t* row = row_of(tk);
    if (piece < kV4Nope / 16) {
      ptx::cp_async_cg_shared_global(dst + tk * 64, row + piece * 16, sl >= 0 ? 16 : 0);
    }
  }
  const int u = t % 8;
#pragma unroll 1
  for (int k = 0; k < 4; ++k) {
    const int tk = t / 8 + 16 * k;
    const int32_t sl = slot_of(s, tk);
    ptx::cp_async_cg_shared_global(
        r.addr + (kDv / kChunkElems - 1) * L::kKvChunkBytes + swizzled(tk, u * 16),
        row_of(tk) + kV4Nope + u * 16, sl >= 0 ? 16 : 0);
  }
  {
    const int32_t sl = slot_of(s, t % 64);
    if (t < kBlockN) {
      cp_async_ca_8(ptx::smem_u32(&sm.gather_scale[r.stage][t]), v4_token(p, max(sl, 0)).scales,
                    sl >= 0 ? 8 : 0);
    }
  }
  ptx::cp_async_commit_group();
}

using fp8::ue8m0;  // a UE8M0 scale as a float

// dequant_v32's counterpart for a V4 block: the RoPE chunk (7) to fp16 for an fp16 q; column
// chunk 8 zeroed (K's columns past 512: q's are zeros, and a NaN times zero is not); then each
// column chunk j < 7 from raw chunk j times its token's scale j: chunks 0..2 (their raw in chunks
// 3 and 4), then raw 3..6 read, a meeting, chunks 3..6 written.
template <typename L, typename T>
__device__ __forceinline__ void dequant_v4(SmallStorage& sm, uint32_t stage_addr, uint32_t stage,
                                           int t, int wg, float k_scale) {
  constexpr int kRopeChunk = kDv / kChunkElems - 1;
  const int u8 = t % 8;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int tk = t / 8 + 16 * k;
    st_shared_v4(stage_addr + kPChunk * L::kKvChunkBytes + swizzled(tk, u8 * 16), 0, 0, 0, 0);
    if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
      const uint32_t at = stage_addr + kRopeChunk * L::kKvChunkBytes + swizzled(tk, u8 * 16);
      uint32_t w[4];
      ld_shared_v4(at, w);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
        w[i] = pack2<__half>(f.x, f.y);
      }
      st_shared_v4(at, w[0], w[1], w[2], w[3]);
    }
  }
  const int u = t % 4;
  uint2 g[2];  // the 8 scale bytes of tokens t / 4 and t / 4 + 32
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    g[k] = *reinterpret_cast<const uint2*>(&sm.gather_scale[stage][t / 4 + 32 * k]);
  }
  auto step = [&](int j, const uint32_t(&v)[2][4]) {
    const uint32_t at = stage_addr + j * L::kKvChunkBytes;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int tk = t / 4 + 32 * k;
      const uint32_t word = j < 4 ? g[k].x : g[k].y;
      const float scale = ue8m0((word >> (8 * (j % 4))) & 0xffu) * k_scale;
      uint32_t w[8];
      dequant16<T>(make_uint4(v[k][0], v[k][1], v[k][2], v[k][3]), scale, w);
      st_shared_v4(at + swizzled(tk, u * 32), w[0], w[1], w[2], w[3]);
      st_shared_v4(at + swizzled(tk, u * 32 + 16), w[4], w[5], w[6], w[7]);
    }
  };
  auto load = [&](int j, uint32_t(&v)[2][4]) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      ld_shared_v4(raw_chunk_v4<L>(stage_addr, j) + (t / 4 + 32 * k) * 64 + u * 16, v[k]);
    }
  };
#pragma unroll
  for (int j = 0; j < 3; ++j) {
    uint32_t v[2][4];
    load(j, v);
    step(j, v);
  }
  uint32_t v[4][2][4];
#pragma unroll
  for (int j = 0; j < 4; ++j) load(3 + j, v[j]);
  dequant_sync(sm, wg, 0);
#pragma unroll
  for (int j = 0; j < 4; ++j) step(3 + j, v[j]);
  cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);
  dequant_sync(sm, wg, 1);
}

// ---- The producer ------------------------------------------------------------------------------

// The producer warpgroup of sparse decode: walks the consumers' chunks. The V4 gather is a
// kernel of its own (kV4): in the kernels of the other caches its addressing slowed the V3.2
// sparse decode by 5-6% geomean, up to 17% (H200, 2026-11-27; the producer has 40 registers).
// Within a chunk it runs one block ahead: block b + 1 is requested (its stage free once the
// consumers are done with block b - 1) before block b is completed, so that one block's copies are
// always in flight. The slots are read one block before they are used and the rows prefetched into
// L2 a block before they are requested.
template <typename L, int kTileRows, typename T, bool kV4>
__device__ __forceinline__ void produce_gather(const DecodeParams& p, const Smem& s, int m_tile,
                                               int32_t cta) {
  const int t = static_cast<int>(threadIdx.x) - kConsumerThreads;
  const int lane = t % 32;
  SmallStorage& sm = *s.small;
  const int32_t row0 = m_tile * kTileRows;
  const uint32_t kv_smem = ptx::smem_u32(s.kv);
  const bool v32 = !kV4 && p.fill == Fill::kGatherV32;
  const uint32_t row_bytes = kV4 ? kV4DataBytes : v32 ? kBlockwiseBytes : kRow16Bytes;
  plan::ChunkIterator chunks(p.plan, p.schedule, cta, p.batch, &sm.part, p.seq_lens, p.max_len);
  chunks.skip_dead_tiles(p.out_view, row0);  // var_q
  plan::Chunk c;
  uint32_t n_chunk = 0, n_block = 0;
  while (chunks.next(&c)) {
    if (t < 32) issue_q<L, kTileRows>(p, s, c, row0, n_chunk, lane);
    ++n_chunk;
    const int32_t* slots = p.block_table + int64_t{c.request} * p.block_table_stride;
    // Block b's slots, two per lane (lane k's: tokens k and 32 + k); its rows into L2.
    auto slots_of = [&](int32_t b, int32_t(&s2)[2]) {
      const int32_t tok0 = c.token_begin + b * kBlockN;
      s2[0] = tok0 + lane < c.token_end ? slots[tok0 + lane] : -1;
      s2[1] = tok0 + 32 + lane < c.token_end ? slots[tok0 + 32 + lane] : -1;
    };
    auto prefetch = [&](int32_t b) {
      const int32_t tok = c.token_begin + b * kBlockN + t;
      if (t < kBlockN && tok < c.token_end) {
        if constexpr (kV4) {
          prefetch_l2(v4_token(p, slots[tok]).data, row_bytes);
        } else {
          prefetch_l2(p.kv_cache + int64_t{slots[tok]} * p.kv_view.stride_page, row_bytes);
        }
      }
    };
    auto issue = [&](int32_t b, const int32_t(&s2)[2]) {
      const StageRef r = stage_ref<L>(kv_smem, n_block + b);
      if constexpr (kV4) {
        issue_v4<L>(p, sm, r, s2, t);
      } else if (v32) {
        issue_v32<L>(p, sm, r, s2, t);
      } else {
        issue16<L>(p, sm, r, s2, t);
      }
    };
    const int32_t n = (c.token_end - c.token_begin + kBlockN - 1) / kBlockN;
    // An empty chunk (the cluster schedule hands them out) has no block: nothing is requested
    // (a block requested and never landed wrote into a stage that the epilogue reuses).
    if (n == 0) continue;
    prefetch(0);
    prefetch(1);
    int32_t s_now[2], s_next[2] = {-1, -1};
    slots_of(0, s_now);
    if (n > 1) slots_of(1, s_next);
    issue(0, s_now);
#pragma unroll 1
    for (int32_t b = 0; b < n; ++b) {
      const StageRef r = stage_ref<L>(kv_smem, n_block + b);
      const bool more = b + 1 < n;
      if (more) {
        prefetch(b + 2);
        s_now[0] = s_next[0];
        s_now[1] = s_next[1];
        if (b + 2 < n) slots_of(b + 2, s_next);
        issue(b + 1, s_now);
      }
      if (more) {
        land_block<1>(sm, r);
      } else {
        land_block<0>(sm, r);
      }
    }
    n_block += n;
  }
}

#endif  // MLAKIT_SM90_WGMMA

}  // namespace mlakit::sm90
