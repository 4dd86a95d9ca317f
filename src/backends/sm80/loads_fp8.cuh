// Loads of the sm80 decode kernel for an fp8 (e4m3) cache and an fp8 q: the values are widened
// to the kernel's 16-bit type T on their way into shared memory, so the tiles there are the ones
// the 16-bit kernel reads (config.h) and the math is unchanged. A KV tile is read from global
// memory into registers (fetch) one tile ahead of its store (store: widen, then 16-byte stores
// into the swizzled layout), so the loads of tile t + stages - 1 are in flight while tile t is
// computed; cp.async cannot widen.
//
// Each thread moves 9 pieces of a tile (32 tokens x 576 bytes): 16 bytes with 128 threads, 8 with
// 256, consecutive threads on consecutive bytes of a token. Tokens at or past the chunk's end are
// zeros, never read. q and the cache may be views, as in loads.cuh.
#pragma once

#include "backends/sm80/config.h"
#include "backends/sm80/loads.cuh"
#include "backends/sm80/params.h"
#include "kernels/common/fp8.cuh"
#include "plan/compact.h"
#include "plan/work.cuh"

namespace mlakit::sm80 {

template <typename Cfg>
struct Fp8Pieces {
  static constexpr int kPerThread = 9;
  static constexpr int kBytes = kBlockN * kDqk / (Cfg::kThreads * kPerThread);  // 16 or 8
  static constexpr int kPerToken = kDqk / kBytes;
  static constexpr int kWords = kBytes / 4;
  static_assert(kBytes * Cfg::kThreads * kPerThread == kBlockN * kDqk && kBytes % 8 == 0);
};

// One thread's pieces of a KV tile, in flight between fetch and store.
template <typename Cfg>
struct Fp8TileRegs {
  uint32_t w[Fp8Pieces<Cfg>::kPerThread][Fp8Pieces<Cfg>::kWords];
  uint32_t bad;  // bit j: token j, one of whose pieces this thread holds, is in a bad page
};

// Widens kWords words of e4m3 (dims d0 .. d0 + 4 kWords - 1 of a row) and stores them as T at
// row `row` of a [rows][576] tile of T in the swizzled layout of config.h.
template <typename T, int kWords>
__device__ __forceinline__ void store_widened(uint32_t s_tile, int row, int d0,
                                              const uint32_t (&w)[kWords]) {
#pragma unroll
  for (int k = 0; k < kWords; k += 2) {
    uint32_t v[4];
    fp8::widen4<T>(w[k], v[0], v[1]);
    fp8::widen4<T>(w[k + 1], v[2], v[3]);
    const uint32_t at = s_tile + row_chunk_offset(row, (d0 + 4 * k) / 8);
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "r"(v[0]), "r"(v[1]),
                 "r"(v[2]), "r"(v[3])
                 : "memory");
  }
}

template <int kWords>
__device__ __forceinline__ void load_words(const uint8_t* src, uint32_t (&w)[kWords]) {
  if constexpr (kWords == 4) {
    const uint4 v = *reinterpret_cast<const uint4*>(src);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else {
    static_assert(kWords == 2);
    const uint2 v = *reinterpret_cast<const uint2*>(src);
    w[0] = v.x, w[1] = v.y;
  }
}

// The fp8 q tile: rows [row0, row0 + kRows) of request `request` widened to T (rows past the
// request's last, or its q_len with var_q, are zeros). Synchronous: once per chunk.
template <typename T, typename Cfg>
__device__ __forceinline__ void load_q_fp8(uint32_t s_q, const DecodeParams& p, int request,
                                           int row0) {
  constexpr int kPieces = Cfg::kRows * kDqk / 16;
  const auto* g_q = static_cast<const uint8_t*>(p.q);
  const int valid_rows = min(Cfg::kRows, p.q_view.live_rows(request, p.rows) - row0);
  for (int idx = static_cast<int>(threadIdx.x); idx < kPieces; idx += Cfg::kThreads) {
    const int row = idx / (kDqk / 16), d0 = idx % (kDqk / 16) * 16;
    uint32_t w[4] = {0, 0, 0, 0};
    if (row < valid_rows) load_words<4>(g_q + p.q_view.offset(request, row0 + row) + d0, w);
    store_widened<T, 4>(s_q, row, d0, w);
  }
}

// Gathers the e4m3 KV tiles of one chunk through the block table.
template <typename T, typename Cfg>
class Fp8KvLoader {
 public:
  using Pieces = Fp8Pieces<Cfg>;

  __device__ __forceinline__ Fp8KvLoader(const DecodeParams& p, const plan::Chunk& c)
      : g_kv_(static_cast<const uint8_t*>(p.kv)),
        view_(p.kv_view),
        g_pages_(p.block_table + int64_t{c.request} * p.block_table_stride),
        page_shift_(p.page_shift),
        num_pages_(p.num_pages),
        token_end_(c.token_end) {}

  // The tile starting at token `tile_start` into registers (zeros past the chunk's end).
  __device__ __forceinline__ void fetch(int tile_start, Fp8TileRegs<Cfg>& r) const {
    r.bad = 0;
#pragma unroll
    for (int k = 0; k < Pieces::kPerThread; ++k) {
      const int idx = k * Cfg::kThreads + static_cast<int>(threadIdx.x);
      const int row = idx / Pieces::kPerToken;
      const int pos = tile_start + row;
#pragma unroll
      for (int i = 0; i < Pieces::kWords; ++i) r.w[k][i] = 0;
      // A page id out of range reads nothing: its tokens are zeros.
      const int32_t page =
          pos < token_end_ ? plan::valid_page(g_pages_[pos >> page_shift_], num_pages_) : -1;
      if (page >= 0) {
        load_words<Pieces::kWords>(g_kv_ + view_.offset(page, pos & ((1 << page_shift_) - 1)) +
                                       idx % Pieces::kPerToken * Pieces::kBytes,
                                   r.w[k]);
      } else if (pos < token_end_) {
        r.bad |= 1u << row;
      }
    }
  }

  // The fetched tile, widened, into the stage at s_kv.
  __device__ __forceinline__ void store(uint32_t s_kv, const Fp8TileRegs<Cfg>& r) const {
#pragma unroll
    for (int k = 0; k < Pieces::kPerThread; ++k) {
      const int idx = k * Cfg::kThreads + static_cast<int>(threadIdx.x);
      store_widened<T, Pieces::kWords>(s_kv, idx / Pieces::kPerToken,
                                       idx % Pieces::kPerToken * Pieces::kBytes, r.w[k]);
    }
  }

 private:
  const uint8_t* g_kv_;
  plan::KvView view_;
  const int32_t* g_pages_;
  int page_shift_;
  int32_t num_pages_;
  int token_end_;
};

// The caches with per-group scales, sparse only: V3.2 (KvLayout::kFp8Blockwise, 656 bytes a
// token: 512 e4m3 values, their four fp32 scales, one per 128, then 64 bf16 RoPE values) and V4
// (KvLayout::kFp8V4, d_qk 512: per token 448 e4m3 values and 64 bf16 RoPE values, and in the
// page's scale rows seven UE8M0 scales, one per 64; plan::V4Cache, the extra cache's slots tagged
// by plan::kExtraSlot). The tiles of one chunk are gathered through the compacted slots (pages of
// one token) and widened to T on their way into shared memory, each value times its group's scale
// and the cache's k_scale (one rounding), so the kernel's math and its softmax and output factors
// are the 16-bit cache's. V4 fills dims 0..511 (V is all of them) and zeros 512..575 (q's are
// zeros too). Each thread moves 8 (V4: 7) pieces of the e4m3 part (kBytes each, with its group's
// scale) and 2 of the RoPE part, as Fp8KvLoader does 9: consecutive threads on consecutive bytes
// of a token.
template <typename Cfg, bool kV4>
struct ScaledPieces {
  static constexpr int kBytes = Fp8Pieces<Cfg>::kBytes;  // 16 or 8
  static constexpr int kWords = kBytes / 4;
  static constexpr int kValues = kV4 ? kV4Nope : kDv;  // e4m3 values a token
  static constexpr int kGroup = kV4 ? kV4Group : kBlockwiseGroup;
  static constexpr int kRopeDim = kValues;  // the first RoPE dim
  static constexpr int kRopeAt = kV4 ? kV4Nope : kDv + kDv / kBlockwiseGroup * 4;  // its byte
  static constexpr int kRopeDims = 64;
  static constexpr int kLatentPerToken = kValues / kBytes;
  static constexpr int kRopePerToken = kRopeDims * 2 / kBytes;
  static constexpr int kLatent = kBlockN * kLatentPerToken / Cfg::kThreads;  // 8 (V4: 7)
  static constexpr int kRope = kBlockN * kRopePerToken / Cfg::kThreads;      // 2
  // V4: dims 512..575 zeroed, in 16-byte chunks.
  static constexpr int kZeroChunksPerToken = kV4 ? (kDqk - kV4Dqk) / 8 : 0;
  static constexpr int kZero = kBlockN * kZeroChunksPerToken / Cfg::kThreads;
  static_assert(kLatent * Cfg::kThreads == kBlockN * kLatentPerToken &&
                kRope * Cfg::kThreads == kBlockN * kRopePerToken &&
                kZero * Cfg::kThreads == kBlockN * kZeroChunksPerToken && kGroup % kBytes == 0);
  static_assert(kV4 ? kRopeAt + kRopeDims * 2 == kV4DataBytes
                    : kRopeAt + kRopeDims * 2 == kBlockwiseBytes);
};

template <typename Cfg, bool kV4>
struct ScaledTileRegs {
  using Pieces = ScaledPieces<Cfg, kV4>;
  uint32_t latent[Pieces::kLatent][Pieces::kWords];
  float scale[Pieces::kLatent];  // the group's, times k_scale
  uint32_t rope[Pieces::kRope][Pieces::kWords];
  uint32_t bad;  // bit j: token j, one of whose pieces this thread holds, has no valid slot
};

template <typename T, typename Cfg, bool kV4>
class ScaledKvLoader {
 public:
  using Pieces = ScaledPieces<Cfg, kV4>;

  __device__ __forceinline__ ScaledKvLoader(const DecodeParams& p, const plan::Chunk& c,
                                            float k_scale)
      : g_kv_(static_cast<const uint8_t*>(p.kv)),
        view_(p.kv_view),
        v4_(p.v4),
        g_pages_(p.block_table + int64_t{c.request} * p.block_table_stride),
        page_shift_(p.page_shift),
        num_pages_(p.num_pages),
        token_end_(c.token_end),
        k_scale_(k_scale) {}

  // The tile starting at token `tile_start` into registers (zeros past the chunk's end and for
  // slots out of range, which are marked bad).
  __device__ __forceinline__ void fetch(int tile_start, ScaledTileRegs<Cfg, kV4>& r) const {
    r.bad = 0;
#pragma unroll
    for (int k = 0; k < Pieces::kLatent; ++k) {
      const int idx = k * Cfg::kThreads + static_cast<int>(threadIdx.x);
      const int row = idx / Pieces::kLatentPerToken;
      const int at = idx % Pieces::kLatentPerToken * Pieces::kBytes;
#pragma unroll
      for (int i = 0; i < Pieces::kWords; ++i) r.latent[k][i] = 0;
      r.scale[k] = 0.0f;
      const uint8_t* scales;
      if (const uint8_t* tok = token(tile_start, row, r.bad, &scales)) {
        load_words<Pieces::kWords>(tok + at, r.latent[k]);
        const int g = at / Pieces::kGroup;
        const float scale = kV4 ? fp8::ue8m0(scales[g]) : reinterpret_cast<const float*>(scales)[g];
        r.scale[k] = scale * k_scale_;
      }
    }
#pragma unroll
    for (int k = 0; k < Pieces::kRope; ++k) {
      const int idx = k * Cfg::kThreads + static_cast<int>(threadIdx.x);
      const int row = idx / Pieces::kRopePerToken;
      const int at = idx % Pieces::kRopePerToken * Pieces::kBytes;
#pragma unroll
      for (int i = 0; i < Pieces::kWords; ++i) r.rope[k][i] = 0;
      const uint8_t* scales;
      if (const uint8_t* tok = token(tile_start, row, r.bad, &scales)) {
        load_words<Pieces::kWords>(tok + Pieces::kRopeAt + at, r.rope[k]);
      }
    }
  }

  // The fetched tile, widened, into the stage at s_kv.
  __device__ __forceinline__ void store(uint32_t s_kv, const ScaledTileRegs<Cfg, kV4>& r) const {
#pragma unroll
    for (int k = 0; k < Pieces::kLatent; ++k) {
      const int idx = k * Cfg::kThreads + static_cast<int>(threadIdx.x);
      const int row = idx / Pieces::kLatentPerToken;
      const int d0 = idx % Pieces::kLatentPerToken * Pieces::kBytes;  // one value a byte
#pragma unroll
      for (int i = 0; i < Pieces::kWords; i += 2) {
        uint32_t v[4];
        fp8::dequant4<T>(r.latent[k][i], r.scale[k], v[0], v[1]);
        fp8::dequant4<T>(r.latent[k][i + 1], r.scale[k], v[2], v[3]);
        store_words(s_kv + row_chunk_offset(row, (d0 + 4 * i) / 8), v);
      }
    }
#pragma unroll
    for (int k = 0; k < Pieces::kRope; ++k) {
      const int idx = k * Cfg::kThreads + static_cast<int>(threadIdx.x);
      const int row = idx / Pieces::kRopePerToken;
      // Two bytes a value.
      const int d0 = Pieces::kRopeDim + idx % Pieces::kRopePerToken * Pieces::kBytes / 2;
      uint32_t v[Pieces::kWords];
#pragma unroll
      for (int i = 0; i < Pieces::kWords; ++i) {
        v[i] = r.rope[k][i];
        if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
          const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v[i]));
          v[i] = pack2<T>(f.x, f.y);
        }
      }
      const uint32_t at = s_kv + row_chunk_offset(row, d0 / 8) + (d0 % 8) * 2;
      if constexpr (Pieces::kWords == 4) {
        store_words(at, v);
      } else {
        asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(at), "r"(v[0]), "r"(v[1])
                     : "memory");
      }
    }
    if constexpr (kV4) {
#pragma unroll
      for (int k = 0; k < Pieces::kZero; ++k) {
        const int idx = k * Cfg::kThreads + static_cast<int>(threadIdx.x);
        const uint32_t zeros[4] = {0, 0, 0, 0};
        store_words(s_kv + row_chunk_offset(idx / Pieces::kZeroChunksPerToken,
                                            kV4Dqk / 8 + idx % Pieces::kZeroChunksPerToken),
                    zeros);
      }
    }
  }

 private:
  // Token `row` of the tile at tile_start and its scales, or nullptr (past the chunk's end; or a
  // slot out of range, marked in bad).
  __device__ __forceinline__ const uint8_t* token(int tile_start, int row, uint32_t& bad,
                                                  const uint8_t** scales) const {
    const int pos = tile_start + row;
    if (pos >= token_end_) return nullptr;
    if constexpr (kV4) {
      // The compaction keeps only slots of cached tokens (plan/compact.h).
      const int32_t slot = g_pages_[pos];
      if (slot < 0) {
        bad |= 1u << row;
        return nullptr;
      }
      // The two caches' fields chosen one by one (an indexed copy went to local memory).
      const bool extra = (slot & plan::kExtraSlot) != 0;
      const uint8_t* base = extra ? v4_[1].base : v4_[0].base;
      const int64_t page_stride = extra ? v4_[1].page_stride : v4_[0].page_stride;
      const int32_t shift = extra ? v4_[1].page_shift : v4_[0].page_shift;
      const int32_t scale_offset = extra ? v4_[1].scale_offset : v4_[0].scale_offset;
      const int32_t s = slot & (plan::kExtraSlot - 1);
      const uint8_t* page = base + (s >> shift) * page_stride;
      const int32_t t = s & ((1 << shift) - 1);
      *scales = page + scale_offset + t * kV4ScaleBytes;
      return page + int64_t{t} * kV4DataBytes;
    } else {
      const int32_t page = plan::valid_page(g_pages_[pos >> page_shift_], num_pages_);
      if (page < 0) {
        bad |= 1u << row;
        return nullptr;
      }
      const uint8_t* tok = g_kv_ + view_.offset(page, pos & ((1 << page_shift_) - 1));
      *scales = tok + kDv;
      return tok;
    }
  }

  __device__ __forceinline__ static void store_words(uint32_t at, const uint32_t (&v)[4]) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "r"(v[0]), "r"(v[1]),
                 "r"(v[2]), "r"(v[3])
                 : "memory");
  }

  const uint8_t* g_kv_;
  plan::KvView view_;
  const plan::V4Cache* v4_;  // the kernel's (grid-constant) parameters
  const int32_t* g_pages_;
  int page_shift_;
  int32_t num_pages_;
  int token_end_;
  float k_scale_;
};

}  // namespace mlakit::sm80
