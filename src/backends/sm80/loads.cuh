// Loads of the sm80 decode kernel (all threads): the query tile once per chunk and the KV tiles,
// gathered token by token through the block table with 16-byte cp.async copies into the swizzled
// shared layout of config.h.
//
// Each group of 8 consecutive threads copies 128 contiguous bytes of one token per instruction, so
// a warp reads 4 full 128-byte lines. Tokens at or past the chunk's end are zero-filled without a
// read: the cache tail past seq_len may hold anything (NaN in the tests), and NaN * 0 is NaN.
// q and the cache may be views (RunArgs, "Views"): each row's address comes from its strides
// (DecodeParams::q_view, kv_view); a row's 576 elements are contiguous.
#pragma once

#include "backends/sm80/config.h"
#include "backends/sm80/params.h"
#include "kernels/common/ptx.h"
#include "plan/work.cuh"

namespace mlakit::sm80 {

// Byte offset of 16-byte chunk `chunk` of row `row` in a [rows][576] tile (Q or KV).
__device__ __forceinline__ uint32_t row_chunk_offset(int row, int chunk) {
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// Query rows [row0, row0 + kRows) of request `request`; rows past its last (with var_q, past its
// q_len: RowView::live_rows) are zero-filled. Copied by kCopiers threads, this one being number
// tid.
template <typename T, typename Cfg, int kCopiers = Cfg::kThreads>
__device__ __forceinline__ void load_q(uint32_t s_q, const DecodeParams& p, int request, int row0,
                                       int tid = static_cast<int>(threadIdx.x)) {
  static_assert(Cfg::kRows * kRowChunks % kCopiers == 0);
  const T* g_q = static_cast<const T*>(p.q);
  const int valid_rows = min(Cfg::kRows, p.q_view.live_rows(request, p.rows) - row0);
  // Unrolled only in part: 36 copies per thread (kRoles' score warps) held 72 registers of
  // addresses.
#pragma unroll 9
  for (int k = 0; k < Cfg::kRows * kRowChunks / kCopiers; ++k) {
    const int idx = k * kCopiers + tid;
    const int row = idx / kRowChunks, chunk = idx % kRowChunks;
    const bool valid = row < valid_rows && chunk < p.q_chunks;
    const T* src = g_q + (valid ? p.q_view.offset(request, row0 + row) + chunk * 8 : 0);
    ptx::cp_async_cg_shared_global(s_q + row_chunk_offset(row, chunk), src, valid ? 16 : 0);
  }
}

// Block-table entries of the tokens one thread copies in one tile, as read (KvLoader::fetch_ids).
template <typename Cfg>
struct TileIds {
  int32_t id[Cfg::kLoadPasses];
};

// The same entries checked (KvLoader::check): page ids, -1 for an id outside the cache.
template <typename Cfg>
struct TilePages {
  int32_t page[Cfg::kLoadPasses];
};

// Gathers KV tiles of one chunk. Copying thread t (0 .. kLoadThreads - 1: tid, by default the
// thread index) copies chunks (t % 8) + 8k of tokens t / 8 + pass * kLoadTokensPerPass of each
// tile. The page ids of a tile are read (fetch_ids)
// a tile ahead of its copy (load), so the block-table read is not on the path from the barrier to
// the copies, and checked (check) where the copy uses them: checked at the read, the check waited
// there for it and held the tile's math behind it (SASS, docs/sm80-decode.md item 28).
template <typename T, typename Cfg>
class KvLoader {
 public:
  __device__ __forceinline__ KvLoader(const DecodeParams& p, const plan::Chunk& c,
                                      int tid = static_cast<int>(threadIdx.x))
      : g_kv_(static_cast<const T*>(p.kv)),
        view_(p.kv_view),
        g_pages_(p.block_table + int64_t{c.request} * p.block_table_stride),
        page_shift_(p.page_shift),
        num_pages_(p.num_pages),
        token_end_(c.token_end),
        tid_(tid) {}

  // The tile's token this thread copies in pass `pass` (0 .. kBlockN - 1).
  __device__ __forceinline__ int token(int pass) const {
    return tid_ / 8 + pass * Cfg::kLoadTokensPerPass;
  }

  // The block-table entries of the tile starting at token `tile_start` (none read past the
  // chunk's end: 0 there).
  __device__ __forceinline__ TileIds<Cfg> fetch_ids(int tile_start) const {
    TileIds<Cfg> ids;
#pragma unroll
    for (int pass = 0; pass < Cfg::kLoadPasses; ++pass) {
      const int pos = tile_start + token(pass);
      ids.id[pass] = loads() && pos < token_end_ ? g_pages_[pos >> page_shift_] : 0;
    }
    return ids;
  }

  // The page ids of `ids`: -1 for an id outside the cache (plan::valid_page; 0, the id past the
  // chunk's end, is a page: the cache has at least one).
  __device__ __forceinline__ TilePages<Cfg> check(const TileIds<Cfg>& ids) const {
    TilePages<Cfg> pages;
#pragma unroll
    for (int pass = 0; pass < Cfg::kLoadPasses; ++pass) {
      pages.page[pass] = plan::valid_page(ids.id[pass], num_pages_);
    }
    return pages;
  }

  // Bit j set: token j of the tile, one this thread copies with `pages`, is in a bad page
  // (check made its id -1; plan/page_mask.cuh).
  __device__ __forceinline__ uint32_t bad_tokens(const TilePages<Cfg>& pages) const {
    uint32_t bits = 0;
#pragma unroll
    for (int pass = 0; pass < Cfg::kLoadPasses; ++pass) {
      if (pages.page[pass] < 0) bits |= 1u << token(pass);
    }
    return bits;
  }

  // Copies the tile starting at `tile_start` into `s_kv`.
  __device__ __forceinline__ void load(uint32_t s_kv, int tile_start,
                                       const TilePages<Cfg>& pages) const {
    if (!loads()) return;
#pragma unroll
    for (int pass = 0; pass < Cfg::kLoadPasses; ++pass) {
      const int row = token(pass);
      const int pos = tile_start + row;
      // A page id out of range is -1 (check): its tokens read as zeros, nothing is read.
      const bool valid = pos < token_end_ && pages.page[pass] >= 0;
      // Past the end the page id is 0 (fetch_ids): the address stays inside the cache, and
      // src_bytes 0 reads nothing.
      const int lane8 = tid_ % 8;
      const T* src = g_kv_ +
                     view_.offset(max(pages.page[pass], 0), pos & ((1 << page_shift_) - 1)) +
                     lane8 * 8;
      const int src_bytes = valid ? 16 : 0;
      const uint32_t dst = s_kv + row * kRowBytes + ((lane8 ^ (row & 7)) << 4);
#pragma unroll
      for (int k = 0; k < kRowChunks / 8; ++k) {
        ptx::cp_async_cg_shared_global(dst + k * 128, src + k * 64, src_bytes);
      }
    }
  }

 private:
  // Whether this thread is one of the kLoadThreads that copy.
  __device__ __forceinline__ bool loads() const {
    return Cfg::kLoadThreads == Cfg::kThreads || tid_ < Cfg::kLoadThreads;
  }

  const T* g_kv_;
  plan::KvView view_;
  const int32_t* g_pages_;
  int page_shift_;
  int32_t num_pages_;
  int token_end_;
  int tid_;
};

}  // namespace mlakit::sm80
