// The lightning indexer's logits on the GPU (ops.h, indexer_logits): fp8 MQA scores of every query
// head against every cached indexer key, times the key's scale, relu, weighted by the row's head
// weights and summed over the heads.
//
// Schedule: a CTA of 8 warps takes 64-256 positions (fewer when the grid would be small) of one
// request and a group of its query rows (t0 .. t0 + rows_per_cta - 1, as many as fit in shared
// memory with all their heads). It keeps those rows' heads (e4m3) and weights in shared memory and
// streams the keys in tiles of 64 positions, double-buffered with cp.async (the next tile's copies
// are in flight while the current one is computed). A tile's scores are mma.sync m16n8k32 e4m3 x
// e4m3 -> f32 (sm_89 and newer): a work unit is 16 heads x 16 positions, all 128 values; its fp32
// accumulators get the key's scale, relu and the head's weight, then the unit's 16 heads are summed
// by shuffles and written to a shared-memory row per head group; the groups are summed in a fixed
// order, so logits do not depend on the schedule. Positions past a row's visible length (ops.h) and
// positions whose page id lies outside [0, num_pages) get -inf; nothing is read through such an
// id. A CTA whose positions are all past its rows' lengths only writes -inf.
//
// Data reuse: the keys are read once per CTA (once per request and row group); q once per CTA.
// Graph-capturable: the grid depends only on the arguments' shapes; lengths and page ids are read
// on the device.
//
// Two kernels with that schedule: on sm_90 the scores are wgmma m64n64k32 e4m3 (both operands
// in shared memory with the 128-byte swizzle: a warpgroup takes 64 positions (the rows of the
// product) x 64 heads of one query row; the CTA's two warpgroups take alternate key tiles, all of
// the CTA's tiles loaded at once). There a thread's accumulators are 16 heads of two positions:
// it sums them (scale, relu, weight) and two shuffles add the quad's other heads, so no
// shared-memory reduction is needed; the order is fixed, as above. Elsewhere (sm_89 and sm_100+,
// when the build has their code) mma.sync m16n8k32 e4m3 (the keys double-buffered, a warp's
// unit 16 heads x 16 positions) with the epilogue above.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cuda/ptx>

#include "backends/sm90/wgmma.cuh"
#include "core/check.h"
#include "core/cuda_check.h"
#include "kernels/common/pdl.h"
#include "kernels/common/ptx.h"
#include "ops/indexer/indexer.h"
#include "ops/indexer/indexer_device.cuh"

namespace mlakit::ops {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
using indexer_device::kTile;                       // positions per key tile
constexpr int kMaxChunk = 256;                     // positions per CTA, at most
constexpr int kRowBytes = kIndexerDim + 16;        // a key or head row in shared memory (padded)
constexpr int kMaxGroups = kIndexerMaxHeads / 16;  // 16-head groups
// Shared memory for the query rows of one CTA (heads and weights); the rest is fixed.
constexpr int kQBudget = 96 * 1024;

struct IndexerParams {
  const uint8_t* q;      // [b, next_n, heads, 128] e4m3
  const float* weights;  // [b * next_n, heads]
  const uint8_t* cache;  // [num_pages, page_bytes]
  int64_t page_bytes;    // page_size * 132
  int64_t num_pages;
  int32_t page_size;
  int32_t page_shift;  // log2(page_size) when it is a power of two, else -1
  const int32_t* block_table;
  int64_t block_table_stride;
  const int32_t* seq_lens;
  float* logits;  // [b * next_n, ld]
  int64_t ld;
  int64_t max_len;
  int32_t next_n;
  int32_t heads;
  int32_t groups;        // ceil(heads / 16)
  int32_t rows_per_cta;  // query rows (t) per CTA
  int32_t chunk;         // positions per CTA: a multiple of kTile, at most kMaxChunk
};

// Shared memory layout (dynamic): [rows][groups * 16][kRowBytes] heads, [rows][groups * 16]
// weights, 2 x [kTile][kRowBytes] keys, 2 x [kTile] scales, 2 x [kTile] ok flags, [kMaxGroups]
// [kTile] partial sums.
struct Layout {
  int q, w, k, scale, ok, red, bytes;
};
__host__ __device__ inline Layout layout_of(int rows, int groups) {
  Layout l{};
  const int heads = groups * 16;
  l.q = 0;
  l.w = l.q + rows * heads * kRowBytes;
  l.k = l.w + rows * heads * 4;
  l.scale = l.k + 2 * kTile * kRowBytes;
  l.ok = l.scale + 2 * kTile * 4;
  l.red = l.ok + 2 * kTile * 4;
  l.bytes = l.red + kMaxGroups * kTile * 4;
  return l;
}

using ptx::smem_u32;

// The page (index into the request's block table) and the offset in it of position j: shifts
// for a power-of-two page size (the copy loops run this per 16-byte piece; a division by a
// run-time value costs tens of instructions), else a division.
__device__ __forceinline__ void page_of(const IndexerParams& p, int64_t j, int64_t* index,
                                        int64_t* offset) {
  if (p.page_shift >= 0) {
    *index = j >> p.page_shift;
    *offset = j & (p.page_size - 1);
  } else {
    *index = j / p.page_size;
    *offset = j - *index * p.page_size;
  }
}

// A cp.async of 16 or 4 bytes; `valid` false zero-fills and reads nothing.
template <int kBytes>
__device__ __forceinline__ void cp_async(void* dst, const void* src, bool valid) {
  if constexpr (kBytes == 16) {
    ptx::cp_async_cg_shared_global(smem_u32(dst), src, valid ? 16 : 0);
  } else {
    ptx::cp_async_ca_shared_global_4(smem_u32(dst), src, valid ? 4 : 0);
  }
}

// Issues the copies of the key tile at positions j0 .. j0 + 63 of request i into buffer `buf`.
// Positions past `len` or on a page outside [0, num_pages) are zero-filled and flagged not ok.
template <int kVec>
__device__ __forceinline__ void load_tile(const IndexerParams& p, const int32_t* pages, int64_t j0,
                                          int64_t len, uint8_t* keys, float* scales, int* ok) {
  constexpr int kPieces = kIndexerDim / kVec;  // copies per key
  for (int c = threadIdx.x; c < kTile * kPieces; c += kThreads) {
    const int t = c / kPieces, piece = c % kPieces;
    const int64_t j = j0 + t;
    int64_t page = -1, index, off;
    page_of(p, j, &index, &off);
    if (j < len) page = pages[index];
    const bool valid = page >= 0 && page < p.num_pages;
    const uint8_t* src =
        valid ? p.cache + page * p.page_bytes + off * kIndexerDim + piece * kVec : p.cache;
    cp_async<kVec>(keys + t * kRowBytes + piece * kVec, src, valid);
    if (piece == 0) {
      // The scale through the same copy path (4 bytes), so one wait covers both.
      const uint8_t* s =
          valid ? p.cache + page * p.page_bytes + int64_t{p.page_size} * kIndexerDim + off * 4
                : p.cache;
      cp_async<4>(scales + t, s, valid);
      ok[t] = valid ? 1 : 0;
    }
  }
}

template <int kVec>
__global__ void __launch_bounds__(kThreads) indexer_kernel(const IndexerParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int i = blockIdx.y;
  const int t0 = blockIdx.z * p.rows_per_cta;
  const int rows = min(p.rows_per_cta, p.next_n - t0);
  const int64_t j_begin = int64_t{blockIdx.x} * p.chunk;
  const int64_t j_end = min(j_begin + p.chunk, p.max_len);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tg = lane % 4;

  pdl::griddepcontrol_wait();  // q, weights, the cache or the lengths may come from the previous
                               // kernel (the appends)
  const int64_t len =
      indexer_device::request_length(p.seq_lens, i, p.max_len, p.block_table_stride * p.page_size);
  auto visible = [&](int t) { return indexer_device::visible_length(len, p.next_n, t); };
  const int64_t vis_max = visible(t0 + rows - 1);
  const int64_t computed_end = min(j_end, max(j_begin, vis_max));  // positions with keys to read
  float* out = p.logits + (int64_t{i} * p.next_n + t0) * p.ld;

  // Positions nobody sees in this CTA: -inf.
  for (int r = 0; r < rows; ++r) {
    for (int64_t j = computed_end + threadIdx.x; j < j_end; j += kThreads) {
      out[r * p.ld + j] = -INFINITY;
    }
  }
  if (computed_end > j_begin) {
    const Layout l = layout_of(p.rows_per_cta, p.groups);
    uint8_t* qs = smem + l.q;
    float* ws = reinterpret_cast<float*>(smem + l.w);
    uint8_t* ks = smem + l.k;
    float* ss = reinterpret_cast<float*>(smem + l.scale);
    int* oks = reinterpret_cast<int*>(smem + l.ok);
    float* red = reinterpret_cast<float*>(smem + l.red);
    const int hp = p.groups * 16;  // heads padded to 16
    const int32_t* pages = p.block_table + int64_t{i} * p.block_table_stride;

    // The rows' heads (zero past `heads`) and weights (zero past `heads`).
    const uint8_t* q = p.q + (int64_t{i} * p.next_n + t0) * p.heads * kIndexerDim;
    for (int c = threadIdx.x; c < rows * hp * (kIndexerDim / 16); c += kThreads) {
      const int row = c / (kIndexerDim / 16), piece = c % (kIndexerDim / 16);
      const int r = row / hp, h = row % hp;
      const bool valid = h < p.heads;
      cp_async<16>(qs + row * kRowBytes + piece * 16,
                   valid ? q + (int64_t{r} * p.heads + h) * kIndexerDim + piece * 16 : p.q, valid);
    }
    const float* w = p.weights + (int64_t{i} * p.next_n + t0) * p.heads;
    for (int c = threadIdx.x; c < rows * hp; c += kThreads) {
      const int r = c / hp, h = c % hp;
      ws[c] = h < p.heads ? w[int64_t{r} * p.heads + h] : 0.f;
    }
    load_tile<kVec>(p, pages, j_begin, len, ks, ss, oks);
    ptx::cp_async_commit_group();

    const int tiles = static_cast<int>((computed_end - j_begin + kTile - 1) / kTile);
    const int units = p.groups * (kTile / 16);  // (16 heads, 16 positions) per unit
    for (int tile = 0; tile < tiles; ++tile) {
      const int buf = tile & 1;
      if (tile + 1 < tiles) {
        const int nb = buf ^ 1;
        load_tile<kVec>(p, pages, j_begin + (tile + 1) * kTile, len, ks + nb * kTile * kRowBytes,
                        ss + nb * kTile, oks + nb * kTile);
      }
      ptx::cp_async_commit_group();
      ptx::cp_async_wait_group<1>();  // this tile's copies (and q's, with the first) have landed
      __syncthreads();
      const uint8_t* kt = ks + buf * kTile * kRowBytes;
      const float* st = ss + buf * kTile;
      const int* okt = oks + buf * kTile;
      const int64_t jt = j_begin + int64_t{tile} * kTile;
      for (int r = 0; r < rows; ++r) {
        const uint8_t* qr = qs + r * hp * kRowBytes;
        const float* wr = ws + r * hp;
        for (int u = warp; u < units; u += kWarps) {
          const int grp = u / (kTile / 16), n0 = u % (kTile / 16) * 16;
          float acc[2][4] = {};
#pragma unroll
          for (int k0 = 0; k0 < kIndexerDim; k0 += 32) {
            uint32_t a[4];
            const uint8_t* qa = qr + (grp * 16 + g) * kRowBytes + k0 + 4 * tg;
            a[0] = *reinterpret_cast<const uint32_t*>(qa);
            a[1] = *reinterpret_cast<const uint32_t*>(qa + 8 * kRowBytes);
            a[2] = *reinterpret_cast<const uint32_t*>(qa + 16);
            a[3] = *reinterpret_cast<const uint32_t*>(qa + 8 * kRowBytes + 16);
#pragma unroll
            for (int n = 0; n < 2; ++n) {
              const uint8_t* kb = kt + (n0 + n * 8 + g) * kRowBytes + k0 + 4 * tg;
              ptx::mma_sync_m16n8k32_f32_e4m3(acc[n], a, *reinterpret_cast<const uint32_t*>(kb),
                                              *reinterpret_cast<const uint32_t*>(kb + 16));
            }
          }
          // acc[n][0..1]: head grp*16 + g, positions n0 + 8n + 2tg + {0, 1}; [2..3]: head + 8.
          const float w_lo = wr[grp * 16 + g], w_hi = wr[grp * 16 + g + 8];
#pragma unroll
          for (int n = 0; n < 2; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int col = n0 + n * 8 + 2 * tg + e;
              const float s = st[col];
              float v = w_lo * fmaxf(acc[n][e] * s, 0.f) + w_hi * fmaxf(acc[n][2 + e] * s, 0.f);
              v += __shfl_xor_sync(0xffffffffu, v, 4);
              v += __shfl_xor_sync(0xffffffffu, v, 8);
              v += __shfl_xor_sync(0xffffffffu, v, 16);
              if (g == 0) red[grp * kTile + col] = v;
            }
          }
        }
        __syncthreads();
        const int t = t0 + r;
        const int64_t vis = visible(t);
        for (int c = threadIdx.x; c < kTile; c += kThreads) {
          const int64_t j = jt + c;
          if (j >= j_end) continue;
          float sum = 0.f;
          for (int grp = 0; grp < p.groups; ++grp) sum += red[grp * kTile + c];
          out[r * p.ld + j] = j < vis && okt[c] ? sum : -INFINITY;
        }
        __syncthreads();  // red is rewritten by the next row
      }
    }
  }
  pdl::griddepcontrol_launch_dependents();
}

// ---- sm_90: wgmma ---------------------------------------------------------------------------

constexpr int kWgTiles = kMaxChunk / kTile;  // key tiles per CTA, all resident
using indexer_device::kWgHeads;
using indexer_device::swizzled;

// Shared memory of the wgmma kernel past its 1024-byte alignment: [rows][hp][128] heads and
// [kWgTiles][64][128] keys, both with the 128-byte swizzle (1024-byte atoms of 8 rows), then
// [kWgTiles][64] scales and ok flags, [rows][hp] weights.
struct WgLayout {
  int q, k, scale, ok, w, bytes;
};
__host__ __device__ inline WgLayout wg_layout_of(int rows, int hp) {
  WgLayout l{};
  l.q = 0;
  l.k = l.q + rows * hp * kIndexerDim;
  l.scale = l.k + kWgTiles * kTile * kIndexerDim;
  l.ok = l.scale + kWgTiles * kTile * 4;
  l.w = l.ok + kWgTiles * kTile * 4;
  l.bytes = l.w + rows * hp * 4 + 1024;  // + the alignment of the base
  return l;
}

template <int kVec>
__global__ void __launch_bounds__(kThreads) indexer_wgmma_kernel(const IndexerParams p) {
#if defined(__CUDA_ARCH__) && !defined(MLAKIT_SM90_WGMMA)
  // Code for sm_90 without the "a" features has no wgmma: fail loudly rather than return
  // unwritten logits (the host picks this kernel on sm_90; mlakit builds sm_90a).
  __trap();
#endif
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - smem_u32(smem_raw) % 1024) % 1024);
  const int i = blockIdx.y;
  const int t0 = blockIdx.z * p.rows_per_cta;
  const int rows = min(p.rows_per_cta, p.next_n - t0);
  const int64_t j_begin = int64_t{blockIdx.x} * p.chunk;
  const int64_t j_end = min(j_begin + p.chunk, p.max_len);
  const int wg = threadIdx.x / 128, wt = threadIdx.x % 128;  // warpgroup, its thread
  const int warp = wt / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tg = lane % 4;

  pdl::griddepcontrol_wait();
  const int64_t len =
      indexer_device::request_length(p.seq_lens, i, p.max_len, p.block_table_stride * p.page_size);
  auto visible = [&](int t) { return indexer_device::visible_length(len, p.next_n, t); };
  const int64_t vis_max = visible(t0 + rows - 1);
  const int64_t computed_end = min(j_end, max(j_begin, vis_max));
  float* out = p.logits + (int64_t{i} * p.next_n + t0) * p.ld;
  for (int r = 0; r < rows; ++r) {
    for (int64_t j = computed_end + threadIdx.x; j < j_end; j += kThreads) {
      out[r * p.ld + j] = -INFINITY;
    }
  }
  if (computed_end > j_begin) {
    const int hgroups = (p.heads + kWgHeads - 1) / kWgHeads;
    const int hp = hgroups * kWgHeads;
    const WgLayout l = wg_layout_of(p.rows_per_cta, hp);
    uint8_t* qs = smem + l.q;
    uint8_t* ks = smem + l.k;
    float* ss = reinterpret_cast<float*>(smem + l.scale);
    int* oks = reinterpret_cast<int*>(smem + l.ok);
    float* ws = reinterpret_cast<float*>(smem + l.w);
    const int32_t* pages = p.block_table + int64_t{i} * p.block_table_stride;

    const int64_t row0 = int64_t{i} * p.next_n + t0;
    indexer_device::load_heads(qs, ws, p.q + row0 * p.heads * kIndexerDim,
                               p.weights + row0 * p.heads, rows, p.heads, hp, threadIdx.x,
                               kThreads);
    const int tiles = static_cast<int>((computed_end - j_begin + kTile - 1) / kTile);
    // A key's copies: with 16-byte copies, two threads a key, each 4 of its 8 pieces (the pair
    // reads 32 contiguous bytes an instruction), so the key's address is worked out twice, not
    // per piece (the kernel is bound by instruction issue); with 4-byte copies, one a thread.
    constexpr int kThreadsPerKey = kVec == 16 ? 2 : kIndexerDim / kVec;
    constexpr int kCopies = kIndexerDim / kVec / kThreadsPerKey;  // a thread's copies of a key
    for (int c = threadIdx.x; c < tiles * kTile * kThreadsPerKey; c += kThreads) {
      const int tt = c / kThreadsPerKey, part = c % kThreadsPerKey;  // tt: tile * 64 + token
      const int64_t j = j_begin + tt;
      int64_t page = -1, index, off;
      page_of(p, j, &index, &off);
      if (j < len) page = pages[index];
      const bool valid = page >= 0 && page < p.num_pages;
      const uint8_t* row = p.cache + (valid ? page * p.page_bytes : 0);
      const uint8_t* key = valid ? row + off * kIndexerDim : p.cache;
#pragma unroll
      for (int e = 0; e < kCopies; ++e) {
        const int piece = e * kThreadsPerKey + part;
        cp_async<kVec>(ks + swizzled(tt, piece * kVec), valid ? key + piece * kVec : p.cache,
                       valid);
      }
      if (part == 0) {
        cp_async<4>(ss + tt, valid ? row + int64_t{p.page_size} * kIndexerDim + off * 4 : p.cache,
                    valid);
        oks[tt] = valid ? 1 : 0;
      }
    }
    ptx::cp_async_commit_group();
    ptx::cp_async_wait_group<0>();
#ifdef MLAKIT_SM90_WGMMA
    cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // the copies, read by wgmma
#endif
    __syncthreads();

    for (int tile = wg; tile < tiles; tile += 2) {
      const uint8_t* kt = ks + tile * kTile * kIndexerDim;
      const int64_t jt = j_begin + int64_t{tile} * kTile;
      // The thread's two positions (rows of the products): 16 warp + g and 8 more.
      const int pos_lo = 16 * warp + g, pos_hi = pos_lo + 8;
      const float s_lo = ss[tile * kTile + pos_lo], s_hi = ss[tile * kTile + pos_hi];
      const bool ok_lo = oks[tile * kTile + pos_lo] != 0, ok_hi = oks[tile * kTile + pos_hi] != 0;
      const uint64_t desc_a = sm90::smem_desc_sw128(smem_u32(kt), 0, 1024);
      for (int r = 0; r < rows; ++r) {
        float v_lo, v_hi;
        indexer_device::row_logits(
            desc_a, sm90::smem_desc_sw128(smem_u32(qs + r * hp * kIndexerDim), 0, 1024),
            ws + r * hp, hgroups, s_lo, s_hi, &v_lo, &v_hi);
        if (tg == 0) {
          const int64_t vis = visible(t0 + r);
          const int64_t j_lo = jt + pos_lo, j_hi = jt + pos_hi;
          if (j_lo < j_end) out[r * p.ld + j_lo] = j_lo < vis && ok_lo ? v_lo : -INFINITY;
          if (j_hi < j_end) out[r * p.ld + j_hi] = j_hi < vis && ok_hi ? v_hi : -INFINITY;
        }
      }
    }
  }
  pdl::griddepcontrol_launch_dependents();
}

}  // namespace

Status indexer_logits_cuda(const IndexerLogitsArgs& a, int64_t ld, Stream stream,
                           IndexerKernel kernel) {
  if (a.batch == 0 || a.max_len == 0) return Status::Ok();
  int device = 0;
  IndexerDevice dev;
  MLAKIT_CUDA_RETURN(cudaGetDevice(&device));
  MLAKIT_CUDA_RETURN(cudaDeviceGetAttribute(&dev.major, cudaDevAttrComputeCapabilityMajor, device));
  MLAKIT_CUDA_RETURN(cudaDeviceGetAttribute(&dev.minor, cudaDevAttrComputeCapabilityMinor, device));
  MLAKIT_CUDA_RETURN(cudaDeviceGetAttribute(&dev.sms, cudaDevAttrMultiProcessorCount, device));
  MLAKIT_CUDA_RETURN(
      cudaDeviceGetAttribute(&dev.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  // The TMA kernels (sm_90): one asked for by name, or the op's rule's choice (indexer.h).
  auto run_tma = [&](IndexerKernel k) {
    return k == IndexerKernel::kPersistent
               ? indexer_logits_persistent(a, ld, stream, dev)
               : indexer_logits_tma(a, ld, stream, k == IndexerKernel::kTmaWide, dev);
  };
  if (kernel != IndexerKernel::kAuto && kernel != IndexerKernel::kCopy) return run_tma(kernel);
  const int major = dev.major, minor = dev.minor, sms = dev.sms, smem_optin = dev.smem_optin;
  const IndexerKernel chosen = indexer_auto_kernel(a, major, sms);
  if (kernel == IndexerKernel::kAuto && chosen != IndexerKernel::kCopy) {
    const Status s = run_tma(chosen);
    if (s.code() != StatusCode::kUnsupported) return s;  // else the copy kernel
  }
  // 16-byte copies when every key row is 16-byte aligned: the cache's base and its page stride.
  const int64_t page_bytes = static_cast<int64_t>(indexer_page_bytes(a.page_size));
  const bool vec16 = reinterpret_cast<uintptr_t>(a.index_cache) % 16 == 0 && page_bytes % 16 == 0;
  // sm_90: wgmma (its code is in the build when it targets sm_90a); else mma.sync (sm_89+).
  const bool wgmma = major == 9 && binary_version(indexer_wgmma_kernel<16>) >= 90;
  if (!wgmma && (major * 10 + minor < 89 || binary_version(indexer_kernel<16>) < 89)) {
    return unsupported(
        "indexer_logits on device cuda: needs fp8 tensor cores (sm_89 or newer) "
        "and a build with code for them, given sm_",
        major, minor);
  }
  const int groups = (a.heads + 15) / 16;
  const int hp = wgmma ? (a.heads + kWgHeads - 1) / kWgHeads * kWgHeads : groups * 16;
  const int per_row = hp * (wgmma ? kIndexerDim + 4 : kRowBytes + 4);
  // Query rows per CTA: what fits in kQBudget and in the device's shared memory per block past
  // the fixed part (sm_89 and sm_12x allow 99 KB, sm_90 227 KB).
  const int fixed = wgmma ? wg_layout_of(0, hp).bytes : layout_of(0, groups).bytes;
  const int budget = std::min(kQBudget, smem_optin - fixed);
  if (budget < per_row) {
    return unsupported("heads ", a.heads, " for indexer_logits on device cuda: ", fixed + per_row,
                       " bytes of shared memory a block needed, ", smem_optin, " available");
  }
  const int rows_per_cta = std::min(a.next_n, budget / per_row);
  const int smem_bytes =
      wgmma ? wg_layout_of(rows_per_cta, hp).bytes : layout_of(rows_per_cta, groups).bytes;
  IndexerParams p{};
  indexer_device::fill_common(a, ld, page_bytes, &p);
  p.page_shift = (a.page_size & (a.page_size - 1)) == 0 ? __builtin_ctz(a.page_size) : -1;
  p.groups = groups;
  p.rows_per_cta = rows_per_cta;
  // Positions per CTA: kMaxChunk (four key tiles, q read once for them), fewer while the grid
  // would leave SMs idle (short rows, small batches).
  const int64_t row_groups = (a.next_n + rows_per_cta - 1) / rows_per_cta;
  int chunk = kMaxChunk;
  while (chunk > kTile &&
         (a.max_len + chunk - 1) / chunk * a.batch * row_groups < int64_t{2} * sms) {
    chunk /= 2;
  }
  p.chunk = chunk;
  const int64_t chunks = (a.max_len + chunk - 1) / chunk;  // max_len <= kMaxSeqLen: fits
  if (a.batch > 65535) {
    return invalid_argument("batch", "at most 65535 for indexer_logits on device cuda", a.batch);
  }
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(a.batch),
                  static_cast<unsigned>(row_groups));
  auto launch = [&](auto kernel) -> Status {
    MLAKIT_CUDA_RETURN(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    MLAKIT_CUDA_RETURN(pdl::launch(kernel, grid, dim3(kThreads), smem_bytes,
                                   static_cast<cudaStream_t>(stream), a.enable_pdl && major >= 9,
                                   p));
    MLAKIT_CUDA_RETURN_LAUNCH("indexer_kernel");
    return Status::Ok();
  };
  if (wgmma) return vec16 ? launch(indexer_wgmma_kernel<16>) : launch(indexer_wgmma_kernel<4>);
  return vec16 ? launch(indexer_kernel<16>) : launch(indexer_kernel<4>);
}

}  // namespace mlakit::ops
