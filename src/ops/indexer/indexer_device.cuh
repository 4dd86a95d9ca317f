// Pieces both sm_90 indexer kernels share (indexer.cu's copy kernel, indexer_tma.cu's pipelined
// one): their parameters' common fields (host), a request's clamped length and its rows' visible
// lengths, the query heads and weights into shared memory in wgmma's 128-byte swizzle, and one key
// tile's logits for one query row (wgmma m64n64k32 e4m3, positions as M, heads as N, the heads
// summed in registers).
#pragma once

#include <cuda.h>

#include <cfloat>
#include <cstdint>
#include <cuda/ptx>

#include "backends/sm90/wgmma.cuh"
#include "core/check.h"
#include "kernels/common/ptx.h"
#include "kernels/common/tensor_map.h"
#include "mlakit/ops.h"
#include "ops/indexer/indexer.h"

namespace mlakit::ops::indexer_device {

inline constexpr int kTile = 64;     // positions per key tile (wgmma's M)
inline constexpr int kWgHeads = 64;  // heads per wgmma (N)

// Host: the fields both kernels' parameter structs share, from the op's arguments (ld: the
// logits' row stride; page_bytes: indexer_page_bytes(page_size)).
template <typename Params>
void fill_common(const IndexerLogitsArgs& a, int64_t ld, int64_t page_bytes, Params* p) {
  p->q = a.q;
  p->weights = a.weights;
  p->cache = static_cast<const uint8_t*>(a.index_cache);
  p->page_bytes = page_bytes;
  p->num_pages = a.num_pages;
  p->page_size = a.page_size;
  p->block_table = a.block_table;
  p->block_table_stride = a.block_table_stride;
  p->seq_lens = a.seq_lens;
  p->logits = a.logits;
  p->ld = ld;
  p->max_len = a.max_len;
  p->next_n = a.next_n;
  p->heads = a.heads;
}

// Host: the pipelined kernels' TMA map of the cache's keys, [num_pages][page_size][128] u8 with
// the page stride page_bytes, boxes of min(page_size, 64) rows x 128 bytes in the 128-byte swizzle
// wgmma reads.
inline Status encode_keys_map(const IndexerLogitsArgs& a, int64_t page_bytes, CUtensorMap* map) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  MLAKIT_RETURN_IF_ERROR(tensor_map_encoder(&encode));
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(kIndexerDim),
                              static_cast<cuuint64_t>(a.page_size),
                              static_cast<cuuint64_t>(a.num_pages)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(kIndexerDim),
                                 static_cast<cuuint64_t>(page_bytes)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(kIndexerDim),
                             static_cast<cuuint32_t>(a.page_size < kTile ? a.page_size : kTile), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r =
      encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(a.index_cache), dims, strides,
             box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return Status(StatusCode::kInternal,
                  str_cat("indexer_logits: cuTensorMapEncodeTiled failed for the index cache "
                          "(CUresult ",
                          static_cast<int>(r), ")"));
  }
  return Status::Ok();
}

// Host: what both TMA kernels refuse, naming the kernel (`what`): a device other than sm_90 or a
// build without its sm_90a code (`binary`: the kernel's binary version), a page size TMA boxes do
// not take, a cache (and with need_q, q) not 16-byte aligned, more pages than 32-bit ids name.
inline Status check_tma_call(const IndexerLogitsArgs& a, const char* what, int major, int binary,
                             bool need_q) {
  if (major != 9 || binary < 90) {
    return unsupported(what, ": needs sm_90 and a build with sm_90a code, given sm_", major, "x");
  }
  if (!indexer_tma_takes_page_size(a.page_size)) {
    return unsupported("page_size ", a.page_size, " for ", what,
                       ": a multiple of 64, or 8, 16 or 32");
  }
  auto aligned = [&](const char* name, const void* ptr) -> Status {
    const uintptr_t off = reinterpret_cast<uintptr_t>(ptr) % 16;
    if (off == 0) return Status::Ok();
    return unsupported(name, " for ", what, ": 16-byte aligned, given an address ", off,
                       " bytes past a 16-byte boundary");
  };
  MLAKIT_RETURN_IF_ERROR(aligned("index_cache", a.index_cache));
  if (need_q) MLAKIT_RETURN_IF_ERROR(aligned("q", a.q));
  if (a.num_pages > INT32_MAX) {
    return unsupported("num_pages for ", what, ": at most 2^31 - 1, given ", a.num_pages);
  }
  return Status::Ok();
}

// A producer warp's issue of one key tile (64 positions, `boxes` boxes of p.box_rows) into a
// stage the caller has waited empty: lane b < boxes issues box b (page id `page`, offset `off` in
// the page) with TMA and its scales with a bulk copy, unless the page id is outside
// [0, num_pages) (never read: *mask's bit b clear, its positions get -inf); lane 0 publishes the
// mask and arms `full` with the bytes coming (or only arrives when none is).
template <typename Params>
__device__ __forceinline__ void issue_tile(const Params& p, int lane, int boxes, int32_t page,
                                           int32_t off, uint8_t* keys, float* scales,
                                           uint32_t* mask, uint64_t* full) {
  const bool valid = lane < boxes && page >= 0 && page < p.num_pages;
  const uint32_t bits = __ballot_sync(0xffffffffu, valid);
  if (lane == 0) {
    *mask = bits;
    const uint32_t bytes = __popc(bits) * p.box_rows * (kIndexerDim + 4);
    if (bytes > 0) {
      (void)cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta,
                                                 cuda::ptx::space_shared, full, bytes);
    } else {
      (void)cuda::ptx::mbarrier_arrive(full);
    }
  }
  __syncwarp();
  if (valid) {
    const int32_t coords[3] = {0, off, page};
    cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global,
                                    keys + lane * p.box_rows * kIndexerDim, &p.keys, coords, full);
    const uint8_t* src =
        p.cache + page * p.page_bytes + int64_t{p.page_size} * kIndexerDim + int64_t{off} * 4;
    cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global,
                             scales + lane * p.box_rows, src, static_cast<uint32_t>(p.box_rows * 4),
                             full);
  }
}

// Byte `byte` (a multiple of 4) of row `row` of a 128-byte-swizzled tile: what TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B into a 1024-aligned tile.
__device__ __forceinline__ int swizzled(int row, int byte) {
  return row * kIndexerDim + ((((byte >> 4) ^ row) & 7) << 4) + (byte & 15);
}

// Request i's length, clamped to [0, min(max_len, the tokens its table row can name)].
__device__ __forceinline__ int64_t request_length(const int32_t* seq_lens, int i, int64_t max_len,
                                                  int64_t table_tokens) {
  const int64_t len = seq_lens[i];
  return max(int64_t{0}, min(len, min(max_len, table_tokens)));
}

// Positions query row t of next_n sees: clamp(len - next_n + 1 + t, 0, len) (topk_row_length).
__device__ __forceinline__ int64_t visible_length(int64_t len, int next_n, int t) {
  return max(int64_t{0}, min(len, len - next_n + 1 + t));
}

// The heads of `rows` query rows (q_rows: [rows, heads, 128] e4m3) into qs ([rows][hp][128],
// swizzled; heads past `heads` zero) with cp.async, and their weights into ws ([rows][hp], zero
// past `heads`), by threads t = 0 .. n - 1. The caller commits and waits for the copies.
__device__ __forceinline__ void load_heads(uint8_t* qs, float* ws, const uint8_t* q_rows,
                                           const float* w_rows, int rows, int heads, int hp, int t,
                                           int n) {
  for (int c = t; c < rows * hp * (kIndexerDim / 16); c += n) {
    const int row = c / (kIndexerDim / 16), piece = c % (kIndexerDim / 16);
    const int r = row / hp, h = row % hp;
    const bool valid = h < heads;
    ptx::cp_async_cg_shared_global(
        ptx::smem_u32(qs + swizzled(row, piece * 16)),
        valid ? q_rows + (int64_t{r} * heads + h) * kIndexerDim + piece * 16 : q_rows,
        valid ? 16 : 0);
  }
  for (int c = t; c < rows * hp; c += n) {
    const int r = c / hp, h = c % hp;
    ws[c] = h < heads ? w_rows[int64_t{r} * heads + h] : 0.f;
  }
}

// The pieces of one query row's logits over a 64-position key tile, by a warpgroup (thread wt of
// 128; row_logits puts them together):
//  - products: d = the tile (desc_keys: 64 x 128, swizzled) times 64 heads (desc_q: [64][128],
//    swizzled), wgmma m64n64k32 e4m3 with the positions as M, committed as one group (the caller
//    waits); d[i] is position 16 (wt / 32) + (wt % 32) / 4 + 8 ((i / 2) % 2), head
//    8 (i / 4) + 2 (wt % 4) + i % 2;
//  - add_heads: the thread's 16 heads of its two positions (d: 32 accumulators in products'
//    layout) into *lo and *hi as w_h relu(m d) (w: the 64 heads' weights), in a fixed order; m is 1
//    where every scale of the warp's positions is positive and finite (what the appends write:
//    relu(s d) = s relu(d), and the scale multiplies the sum once, in quad_sum or quad_scatter),
//    else the position's scale;
//  - quad_sum: times the scale (positive), then two shuffles add the quad's other heads (the
//    same in the quad's four threads). Deterministic.
// The descriptor `bytes` further on, as sm90::desc_advance, with the add in the low word only (it
// never carries, see there): the high word stays what the compiler knows it is (a constant for
// these tiles), so a step is one 32-bit add instead of a 64-bit one.
__device__ __forceinline__ uint64_t desc_at(uint64_t desc, uint32_t bytes) {
  return (desc & 0xFFFFFFFF00000000ull) | (static_cast<uint32_t>(desc) + (bytes >> 4));
}

__device__ __forceinline__ void products(uint64_t desc_keys, uint64_t desc_q, float (&d)[32]) {
  sm90::wgmma_fence();
#pragma unroll
  for (int k = 0; k < kIndexerDim / 32; ++k) {
    sm90::wgmma_m64n64k32_e4m3(d, desc_at(desc_keys, 32 * k), desc_at(desc_q, 32 * k), k > 0);
  }
  sm90::wgmma_commit_group();
}

// The same with 128 heads (desc_q: [128][128]): d[i] as above for head 8 (i / 4) + 2 (wt % 4) +
// i % 2, so d[0..31] are heads 0..63 and d[32..63] heads 64..127, each in products' layout.
__device__ __forceinline__ void products128(uint64_t desc_keys, uint64_t desc_q, float (&d)[64]) {
  sm90::wgmma_fence();
#pragma unroll
  for (int k = 0; k < kIndexerDim / 32; ++k) {
    sm90::wgmma_m64n128k32_e4m3(d, desc_at(desc_keys, 32 * k), desc_at(desc_q, 32 * k), k > 0);
  }
  sm90::wgmma_commit_group();
}

// Whether every scale of the warp's positions is positive and finite (add_heads).
__device__ __forceinline__ bool all_positive(float s_lo, float s_hi) {
  return __all_sync(0xffffffffu, s_lo > 0.f && s_lo <= FLT_MAX && s_hi > 0.f && s_hi <= FLT_MAX);
}

// add_heads over the thread's weights as pairs: weights(nb) = the block's weights
// 8 nb + 2 (threadIdx.x % 4) + {0, 1}.
template <typename Weights>
__device__ __forceinline__ void add_heads_by(const float* d, Weights weights, bool positive,
                                             float s_lo, float s_hi, float* lo, float* hi) {
  // Two chains a position (even and odd heads), added at the end: half the dependent steps.
  float l0 = *lo, l1 = 0.f, h0 = *hi, h1 = 0.f;
  if (positive) {
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      const float2 w_h = weights(nb);
      l0 = fmaf(w_h.x, fmaxf(d[4 * nb], 0.f), l0);
      l1 = fmaf(w_h.y, fmaxf(d[4 * nb + 1], 0.f), l1);
      h0 = fmaf(w_h.x, fmaxf(d[4 * nb + 2], 0.f), h0);
      h1 = fmaf(w_h.y, fmaxf(d[4 * nb + 3], 0.f), h1);
    }
  } else {
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      const float2 w_h = weights(nb);
      l0 = fmaf(w_h.x, fmaxf(d[4 * nb] * s_lo, 0.f), l0);
      l1 = fmaf(w_h.y, fmaxf(d[4 * nb + 1] * s_lo, 0.f), l1);
      h0 = fmaf(w_h.x, fmaxf(d[4 * nb + 2] * s_hi, 0.f), h0);
      h1 = fmaf(w_h.y, fmaxf(d[4 * nb + 3] * s_hi, 0.f), h1);
    }
  }
  *lo = l0 + l1;
  *hi = h0 + h1;
}

// add_heads with the thread's weights at wt = w + 2 (threadIdx.x % 4) (a caller that keeps it
// across tiles saves its arithmetic).
__device__ __forceinline__ void add_heads_at(const float* d, const float* wt, bool positive,
                                             float s_lo, float s_hi, float* lo, float* hi) {
  add_heads_by(
      d, [wt](int nb) { return *reinterpret_cast<const float2*>(wt + 8 * nb); }, positive, s_lo,
      s_hi, lo, hi);
}

// add_heads with the thread's 16 weights in registers: w[2 nb + e] = the block's weight
// 8 nb + 2 (threadIdx.x % 4) + e (w indexes a register array: every index is a constant once
// inlined and unrolled).
__device__ __forceinline__ void add_heads_w(const float* d, const float* w, bool positive,
                                            float s_lo, float s_hi, float* lo, float* hi) {
  add_heads_by(
      d, [w](int nb) { return make_float2(w[2 * nb], w[2 * nb + 1]); }, positive, s_lo, s_hi, lo,
      hi);
}

__device__ __forceinline__ void add_heads(const float* d, const float* w, bool positive, float s_lo,
                                          float s_hi, float* lo, float* hi) {
  add_heads_at(d, w + 2 * (threadIdx.x % 4), positive, s_lo, s_hi, lo, hi);
}

__device__ __forceinline__ void quad_sum(bool positive, float s_lo, float s_hi, float* lo,
                                         float* hi) {
  float l = positive ? *lo * s_lo : *lo, h = positive ? *hi * s_hi : *hi;
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  h += __shfl_xor_sync(0xffffffffu, h, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  h += __shfl_xor_sync(0xffffffffu, h, 2);
  *lo = l;
  *hi = h;
}

// The quad's partial sums of a tile's positions pos_lo (lo) and pos_hi (hi), summed over the quad
// and scattered: quad lane tg returns position pos_lo + 8 (tg % 2)'s sum (lanes tg and tg ^ 2
// the same), times its scale where positive. Two shuffles.
__device__ __forceinline__ float quad_scatter(bool positive, float s_lo, float s_hi, float lo,
                                              float hi) {
  const bool odd = (threadIdx.x & 1) != 0;
  float v = odd ? hi : lo;
  v += __shfl_xor_sync(0xffffffffu, odd ? lo : hi, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return positive ? v * (odd ? s_hi : s_lo) : v;
}

// Two rows' partial sums (lo0, hi0: row 0; lo1, hi1: row 1), summed over the quad and
// scattered: quad lane tg returns row tg / 2's sum at position pos_lo + 8 (tg % 2), times its
// scale where positive. Three shuffles.
__device__ __forceinline__ float quad_scatter2(bool positive, float s_lo, float s_hi, float lo0,
                                               float hi0, float lo1, float hi1) {
  const bool up = (threadIdx.x & 2) != 0, odd = (threadIdx.x & 1) != 0;
  float k0 = up ? lo1 : lo0, k1 = up ? hi1 : hi0;
  k0 += __shfl_xor_sync(0xffffffffu, up ? lo0 : lo1, 2);
  k1 += __shfl_xor_sync(0xffffffffu, up ? hi0 : hi1, 2);
  float v = odd ? k1 : k0;
  v += __shfl_xor_sync(0xffffffffu, odd ? k0 : k1, 1);
  return positive ? v * (odd ? s_hi : s_lo) : v;
}

// One query row's logits of a tile: its hgroups x 64 heads (desc_q: [hgroups * 64][128]; wr: their
// weights), 64 at a time (products, add_heads), then quad_sum. Returns the sums in *v_lo and *v_hi.
__device__ __forceinline__ void row_logits(uint64_t desc_keys, uint64_t desc_q, const float* wr,
                                           int hgroups, float s_lo, float s_hi, float* v_lo,
                                           float* v_hi) {
  const bool positive = all_positive(s_lo, s_hi);
  float lo = 0.f, hi = 0.f;
  for (int hg = 0; hg < hgroups; ++hg) {
    float d[32];
    products(desc_keys, sm90::desc_advance(desc_q, hg * kWgHeads * kIndexerDim), d);
    sm90::wgmma_wait_group<0>();
    sm90::fence_accumulators(d);
    add_heads(d, wr + hg * kWgHeads, positive, s_lo, s_hi, &lo, &hi);
  }
  quad_sum(positive, s_lo, s_hi, &lo, &hi);
  *v_lo = lo;
  *v_hi = hi;
}

// A tile's logits for `rows` query rows by a warpgroup, the heads as 64-head blocks
// b = r * hgroups + hg, hgroups 1 or 2 (desc_q: [rows * hgroups * 64][128], swizzled; their
// weights in the same order at ws): two blocks a wgmma m64n128k32, so the keys are read from
// shared memory once for both (the last block alone when their count is odd). A row's sums are
// done at its last block and handed to store(r, v_lo, v_hi); release() is called once the tile's
// last products are done (its keys may then be overwritten).
template <typename Store, typename Release>
__device__ __forceinline__ void tile_logits_wide(uint64_t desc_keys, uint64_t desc_q,
                                                 const float* ws, int hgroups, int rows, float s_lo,
                                                 float s_hi, Store&& store, Release&& release) {
  const bool positive = all_positive(s_lo, s_hi);
  const int hshift = hgroups - 1;  // r = b >> hshift, hg = b & hshift
  const int blocks = rows << hshift;
  float lo = 0.f, hi = 0.f;
  auto add_block = [&](const float* d, int b) {
    add_heads(d, ws + b * kWgHeads, positive, s_lo, s_hi, &lo, &hi);
    if ((b & hshift) == hshift) {
      quad_sum(positive, s_lo, s_hi, &lo, &hi);
      store(b >> hshift, lo, hi);
      lo = hi = 0.f;
    }
  };
  for (int b = 0; b < blocks; b += 2) {
    const uint64_t dq = sm90::desc_advance(desc_q, b * kWgHeads * kIndexerDim);
    if (b + 1 < blocks) {
      float d[64];
      products128(desc_keys, dq, d);
      sm90::wgmma_wait_group<0>();
      sm90::fence_accumulators(d);
      if (b + 2 >= blocks) release();
      add_block(d, b);
      add_block(d + 32, b + 1);
    } else {
      float d[32];
      products(desc_keys, dq, d);
      sm90::wgmma_wait_group<0>();
      sm90::fence_accumulators(d);
      release();
      add_block(d, b);
    }
  }
}

}  // namespace mlakit::ops::indexer_device
