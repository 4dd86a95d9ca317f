// The lightning indexer's logits on sm_90, pipelined (ops.h, indexer_logits; indexer.h): the
// kernel the op runs on sm_90 for the page sizes it takes (multiples of 64, or 8, 16 and 32).
//
// Schedule: a CTA takes a chunk of positions of one request (a multiple of 64, sized so the grid
// fills every SM about twice) and a group of its query rows (as many of next_n as fit in 96 KB of
// shared memory with their heads and weights). Four producer warps stream the chunk's key tiles (64
// positions, a warp every fourth) through a ring of up to 8 stages with TMA: a tile is one 3-D box
// of the cache (64 x 128 bytes in the 128-byte swizzle wgmma reads) when pages hold 64 or more
// tokens, else one box per page; each box's scales come with one bulk copy. A warp reads its boxes'
// page ids 32 at a time (a lane each), a batch ahead of the boxes it issues; a box whose position
// lies past the request's length, or whose page id is outside [0, num_pages), is not read (its
// positions get -inf). Two consumer warpgroups take alternate tiles: for each query row, wgmma
// m64n64k32 e4m3 with the positions as M and 64 heads as N (the keys and the row's heads in shared
// memory), then each thread sums its 16 heads of two positions (scale, relu, weight) and two
// shuffles add the quad's (indexer_device.cuh: the same order as the copy kernel's, so both give
// the same logits). The stage goes back to the producer once its last row's products are done.
//
// Graph-capturable: the grid depends only on the arguments' shapes; lengths and page ids are read
// on the device. PDL: waits before reading anything a previous kernel may write.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cuda/ptx>

#include "backends/sm90/wgmma.cuh"
#include "core/check.h"
#include "core/cuda_check.h"
#include "kernels/common/mbarrier.cuh"
#include "kernels/common/pdl.h"
#include "kernels/common/ptx.h"
#include "ops/indexer/indexer.h"
#include "ops/indexer/indexer_device.cuh"

namespace mlakit::ops {
namespace {

using indexer_device::kTile;
using indexer_device::kWgHeads;

// The kernel's two shapes. Narrow: two CTAs an SM of 2 consumer warpgroups (64 registers), one
// 64-head product a query row. Wide: one CTA an SM of 4 consumer warpgroups (up to 102 registers),
// products of 128 heads (two rows of 64 heads, or one row of 128) in one wgmma, so a tile's keys
// are read from shared memory once for both. Both: 4 producer warps. Stage s is always filled by
// producer warp s % kProducers and emptied by consumer warpgroup s % kConsumers (so each
// barrier's phases are waited for in order by one party): stage counts are multiples of both.
template <bool kWide>
struct Cfg {
  static constexpr int kConsumers = kWide ? 4 : 2;
  static constexpr int kProducers = 4;
  static constexpr int kThreads = kConsumers * 128 + kProducers * 32;
  static constexpr int kBlocksPerSm = kWide ? 1 : 2;
  static constexpr int kMinStages = 4;
  static constexpr int kMaxStages = kWide ? 16 : 8;
  static constexpr int kMaxTilesPerCta = kWide ? 256 : 64;
  static_assert(kMinStages % kProducers == 0 && kMinStages % kConsumers == 0 &&
                kMaxStages % kMinStages == 0);
};
constexpr int kKeyBytes = kTile * kIndexerDim;  // a tile's keys in shared memory
constexpr int kQBudget = 96 * 1024;             // shared memory for a CTA's query rows, at most
// The producer's lanes look up one box each: a tile has at most 8 (page size 8).
constexpr int kMinBoxRows = 8;

struct TmaParams {
  CUtensorMap keys;  // [num_pages][page_size][128] u8; boxes of box_rows x 128, 128-byte swizzle
  const uint8_t* q;  // [b, next_n, heads, 128] e4m3
  const float* weights;  // [b * next_n, heads]
  const uint8_t* cache;  // [num_pages, page_bytes]
  int64_t page_bytes;
  int64_t num_pages;
  int32_t page_size;
  int32_t box_rows;  // min(page_size, 64): positions of a box
  const int32_t* block_table;
  int64_t block_table_stride;
  const int32_t* seq_lens;
  float* logits;  // [b * next_n, ld]
  int64_t ld;
  int64_t max_len;
  int32_t next_n;
  int32_t heads;
  int32_t rows_per_cta;
  int32_t chunk;   // positions per CTA, a multiple of kTile
  int32_t stages;  // kMinStages or kMaxStages
};

// Shared memory past its 1024-byte alignment: [stages][64][128] keys and [rows][hp][128] heads
// (both swizzled), [stages][64] scales, [rows][hp] weights, [stages] box masks, [stages] full and
// empty barriers.
struct TmaLayout {
  int keys, q, scales, w, mask, full, empty, bytes;
};
__host__ __device__ inline TmaLayout tma_layout_of(int stages, int rows, int hp) {
  TmaLayout l{};
  l.keys = 0;
  l.q = l.keys + stages * kKeyBytes;
  l.scales = l.q + rows * hp * kIndexerDim;
  l.w = l.scales + stages * kTile * 4;
  l.mask = l.w + rows * hp * 4;
  l.full = (l.mask + stages * 4 + 7) / 8 * 8;
  l.empty = l.full + stages * 8;
  l.bytes = l.empty + stages * 8 + 1024;  // + the alignment of the base
  return l;
}

template <bool kWide>
__global__ void __launch_bounds__(Cfg<kWide>::kThreads, Cfg<kWide>::kBlocksPerSm)
    indexer_tma_kernel(const __grid_constant__ TmaParams p) {
  using C = Cfg<kWide>;
#if defined(__CUDA_ARCH__) && !defined(MLAKIT_SM90_WGMMA)
  // Code for sm_90 without the "a" features has no wgmma or TMA: fail loudly rather than return
  // unwritten logits (the host takes this kernel only where its code is sm_90a).
  __trap();
#else
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - ptx::smem_u32(smem_raw) % 1024) % 1024);
  const int i = blockIdx.y;
  const int t0 = blockIdx.z * p.rows_per_cta;
  const int rows = min(p.rows_per_cta, p.next_n - t0);
  const int64_t j_begin = int64_t{blockIdx.x} * p.chunk;
  const int64_t j_end = min(j_begin + p.chunk, p.max_len);
  const int hgroups = (p.heads + kWgHeads - 1) / kWgHeads;
  const int hp = hgroups * kWgHeads;
  const int stages = p.stages;
  const TmaLayout l = tma_layout_of(stages, p.rows_per_cta, hp);
  uint8_t* ks = smem + l.keys;
  uint8_t* qs = smem + l.q;
  float* ss = reinterpret_cast<float*>(smem + l.scales);
  float* ws = reinterpret_cast<float*>(smem + l.w);
  uint32_t* masks = reinterpret_cast<uint32_t*>(smem + l.mask);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + l.full);
  uint64_t* empty = reinterpret_cast<uint64_t*>(smem + l.empty);
  auto wait_parity = [](uint64_t* bar, uint32_t parity) { mbarrier_wait_parity(bar, parity); };

  if (threadIdx.x == 0) {
    // The tensor map is a kernel parameter (no earlier kernel writes it): prefetch it before the
    // PDL wait.
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(&p.keys) : "memory");
    for (int s = 0; s < stages; ++s) {
      cuda::ptx::mbarrier_init(&full[s], 1);     // the producer's arrival and the bytes
      cuda::ptx::mbarrier_init(&empty[s], 128);  // the consuming warpgroup's threads
    }
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
  }
  pdl::griddepcontrol_wait();  // q, weights, the cache or the lengths may come from the appends
  const int64_t len =
      indexer_device::request_length(p.seq_lens, i, p.max_len, p.block_table_stride * p.page_size);
  const int64_t vis_max = indexer_device::visible_length(len, p.next_n, t0 + rows - 1);
  const int64_t computed_end = min(j_end, max(j_begin, vis_max));  // positions with keys to read
  float* out = p.logits + (int64_t{i} * p.next_n + t0) * p.ld;
  for (int r = 0; r < rows; ++r) {  // positions nobody in this CTA sees
    for (int64_t j = computed_end + threadIdx.x; j < j_end; j += C::kThreads) {
      out[r * p.ld + j] = -INFINITY;
    }
  }
  if (computed_end > j_begin) {  // uniform across the CTA
    const int tiles = static_cast<int>((computed_end - j_begin + kTile - 1) / kTile);
    const int64_t row0 = int64_t{i} * p.next_n + t0;
    if (threadIdx.x < C::kConsumers * 128) {
      indexer_device::load_heads(qs, ws, p.q + row0 * p.heads * kIndexerDim,
                                 p.weights + row0 * p.heads, rows, p.heads, hp, threadIdx.x,
                                 C::kConsumers * 128);
      ptx::cp_async_commit_group();
    }
    __syncthreads();  // the barriers' initialization
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp >= C::kConsumers * 4) {
      // The producer warps: warp w feeds tiles w, w + 4, ... (a single warp's chain of page-id
      // reads, barrier waits and TMA issues is too slow to keep the ring full). Each reads the
      // page ids and offsets of its next 32 boxes (boxes = 64 / box_rows a tile) a lane each, a
      // batch ahead of the boxes it issues, so the reads' latency and the division stay off the
      // loop. Lane b issues box b of the tile.
      const int w = warp - C::kConsumers * 4;
      const int boxes = kTile / p.box_rows;
      const int32_t* pages = p.block_table + int64_t{i} * p.block_table_stride;
      // The warp's box e (its tile w + kProducers (e / boxes), box e % boxes): page id (-1 past
      // the length) and offset in the page.
      auto box_at = [&](int e, int32_t* page, int32_t* off) {
        const int64_t j = j_begin + int64_t{w + C::kProducers * (e / boxes)} * kTile +
                          int64_t{e % boxes} * p.box_rows;
        const int64_t index = j / p.page_size;
        *page = j < len ? pages[index] : -1;
        *off = static_cast<int32_t>(j - index * p.page_size);
      };
      int32_t page_now, off_now, page_next, off_next;
      box_at(lane, &page_now, &off_now);
      box_at(32 + lane, &page_next, &off_next);
      // Tile n's stage s = n % stages (always this warp's: stages is a multiple of kProducers) and
      // the ring's round parity (n / stages) % 2, stepped.
      int s = w;
      uint32_t round = 0;
      for (int n = w, e0 = 0; n < tiles; n += C::kProducers, e0 += boxes) {
        if (e0 > 0 && e0 % 32 == 0) {  // the next batch of 32 boxes
          page_now = page_next;
          off_now = off_next;
          box_at(e0 + 32 + lane, &page_next, &off_next);
        }
        const int src = (e0 + lane) % 32;  // lane < boxes: this lane's box
        const int32_t page = __shfl_sync(0xffffffffu, page_now, src);
        const int32_t off = __shfl_sync(0xffffffffu, off_now, src);
        if (n >= stages) wait_parity(&empty[s], round ^ 1);  // the previous round's consumer
        indexer_device::issue_tile(p, lane, boxes, page, off, ks + s * kKeyBytes, ss + s * kTile,
                                   &masks[s], &full[s]);
        s += C::kProducers;
        if (s >= stages) {
          s -= stages;
          round ^= 1;
        }
      }
    } else if (warp < C::kConsumers * 4) {
      const int wg = warp / 4, wt = threadIdx.x % 128;
      const int g = lane / 4, tg = lane % 4;
      ptx::cp_async_wait_group<0>();
      cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // the heads, read by wgmma
      asm volatile("bar.sync 1, %0;\n" ::"n"(C::kConsumers * 128) : "memory");
      // The thread's two positions (rows of the products): 16 (wt / 32) + g and 8 more; their
      // boxes.
      const int pos_lo = 16 * (wt / 32) + g, pos_hi = pos_lo + 8;
      const int box_lo = pos_lo / p.box_rows, box_hi = pos_hi / p.box_rows;
      // Positions from here on count from j_begin (32 bits: a chunk is at most 16384): the chunk's
      // end, the request's length, and row t0's visible length (row t0 + r sees r more, up to
      // the length).
      const int end_rel = static_cast<int>(j_end - j_begin);
      const int len_rel = static_cast<int>(min(max(len - j_begin, int64_t{0}), int64_t{p.chunk}));
      const int vis_rel = static_cast<int>(min(
          max(len - p.next_n + 1 + t0 - j_begin, int64_t{-kIndexerMaxNextN}), int64_t{p.chunk}));
      float* const out_cta = out + j_begin;
      const uint64_t desc_q = sm90::smem_desc_sw128(ptx::smem_u32(qs), 0, 1024);
      const uint64_t desc_k = sm90::smem_desc_sw128(ptx::smem_u32(ks), 0, 1024);

      const int row_desc = hp * kIndexerDim;  // bytes between the rows' heads
      int s = wg;  // tile n's stage (always this warpgroup's) and the ring's round parity
      uint32_t round = 0;
      for (int n = wg; n < tiles; n += C::kConsumers) {
        wait_parity(&full[s], round);
        const uint32_t mask = masks[s];
        const bool ok_lo = (mask >> box_lo) & 1, ok_hi = (mask >> box_hi) & 1;
        const float s_lo = ss[s * kTile + pos_lo], s_hi = ss[s * kTile + pos_hi];
        const uint64_t desc = sm90::desc_advance(desc_k, s * kKeyBytes);
        const int j_lo = n * kTile + pos_lo, j_hi = j_lo + 8;
        // Row r's sums into its logits (tg 0 of each quad).
        auto store = [&](int r, float v_lo, float v_hi) {
          if (tg == 0) {
            float* o = out_cta + r * p.ld;
            const int vis = min(len_rel, vis_rel + r);
            if (j_lo < end_rel) o[j_lo] = j_lo < vis && ok_lo ? v_lo : -INFINITY;
            if (j_hi < end_rel) o[j_hi] = j_hi < vis && ok_hi ? v_hi : -INFINITY;
          }
        };
        if constexpr (kWide) {
          indexer_device::tile_logits_wide(desc, desc_q, ws, hgroups, rows, s_lo, s_hi, store, [&] {
            (void)cuda::ptx::mbarrier_arrive(&empty[s]);
          });  // products done
        } else {
          for (int r = 0; r < rows; ++r) {
            float v_lo, v_hi;
            indexer_device::row_logits(desc, sm90::desc_advance(desc_q, r * row_desc), ws + r * hp,
                                       hgroups, s_lo, s_hi, &v_lo, &v_hi);
            if (r == rows - 1) (void)cuda::ptx::mbarrier_arrive(&empty[s]);  // products done
            store(r, v_lo, v_hi);
          }
        }
        s += C::kConsumers;
        if (s >= stages) {
          s -= stages;
          round ^= 1;
        }
      }
    }
  }
  pdl::griddepcontrol_launch_dependents();
#endif
}

}  // namespace

bool indexer_tma_takes_page_size(int32_t page_size) {
  return page_size % kTile == 0 ||
         (page_size >= kMinBoxRows && page_size < kTile && (page_size & (page_size - 1)) == 0);
}

IndexerKernel indexer_auto_kernel(const IndexerLogitsArgs& a, int major, int sms) {
  const int64_t tiles = (a.max_len + kTile - 1) / kTile * a.batch;
  if (major != 9 || !indexer_tma_takes_page_size(a.page_size) ||
      reinterpret_cast<uintptr_t>(a.index_cache) % 16 != 0 || tiles < sms) {
    return IndexerKernel::kCopy;
  }
  const bool persistent = reinterpret_cast<uintptr_t>(a.q) % 16 == 0 && a.next_n <= 4;
  return persistent ? IndexerKernel::kPersistent : IndexerKernel::kTma;
}

namespace {

template <bool kWide>
Status launch_tma(const IndexerLogitsArgs& a, int64_t ld, Stream stream, const IndexerDevice& dev) {
  using C = Cfg<kWide>;
  const int major = dev.major, sms = dev.sms, smem_optin = dev.smem_optin;
  MLAKIT_RETURN_IF_ERROR(indexer_device::check_tma_call(a, "the pipelined indexer kernel", major,
                                                        binary_version(indexer_tma_kernel<kWide>),
                                                        /*need_q=*/false));
  const int64_t page_bytes = static_cast<int64_t>(indexer_page_bytes(a.page_size));
  const int hp = (a.heads + kWgHeads - 1) / kWgHeads * kWgHeads;
  const int per_row = hp * (kIndexerDim + 4);
  // Positions per CTA: the request's tiles spread so the grid fills every SM about twice (two
  // CTAs fit an SM), at most kMaxTilesPerCta; stages: 8, or 4 for CTAs of fewer tiles.
  const int64_t tiles_per_request = (a.max_len + kTile - 1) / kTile;
  const int budget0 = std::min(kQBudget, smem_optin - tma_layout_of(C::kMaxStages, 0, hp).bytes);
  if (budget0 < per_row) {
    return unsupported("heads ", a.heads, " for the pipelined indexer kernel: ",
                       tma_layout_of(C::kMaxStages, 1, hp).bytes,
                       " bytes of shared memory a block needed, ", smem_optin, " available");
  }
  const int rows_per_cta = std::min(a.next_n, budget0 / per_row);
  const int64_t row_groups = (a.next_n + rows_per_cta - 1) / rows_per_cta;
  const int64_t work = tiles_per_request * a.batch * row_groups;
  const int64_t ctas_wanted = int64_t{2} * C::kBlocksPerSm * sms;
  const int64_t per_cta =
      std::clamp<int64_t>((work + ctas_wanted - 1) / ctas_wanted, 1, C::kMaxTilesPerCta);
  int stages = C::kMaxStages;
  while (stages > C::kMinStages && stages > per_cta) stages /= 2;
  const int smem_bytes = tma_layout_of(stages, rows_per_cta, hp).bytes;
  if (a.batch > 65535) {
    return invalid_argument("batch", "at most 65535 for indexer_logits on device cuda", a.batch);
  }

  TmaParams p{};
  MLAKIT_RETURN_IF_ERROR(indexer_device::encode_keys_map(a, page_bytes, &p.keys));
  indexer_device::fill_common(a, ld, page_bytes, &p);
  p.box_rows = std::min(a.page_size, kTile);
  p.rows_per_cta = rows_per_cta;
  p.chunk = static_cast<int32_t>(per_cta * kTile);
  p.stages = stages;
  const int64_t chunks = (a.max_len + p.chunk - 1) / p.chunk;
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(a.batch),
                  static_cast<unsigned>(row_groups));
  MLAKIT_CUDA_RETURN(cudaFuncSetAttribute(indexer_tma_kernel<kWide>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  MLAKIT_CUDA_RETURN(pdl::launch(indexer_tma_kernel<kWide>, grid, dim3(C::kThreads), smem_bytes,
                                 static_cast<cudaStream_t>(stream), a.enable_pdl, p));
  MLAKIT_CUDA_RETURN_LAUNCH("indexer_tma_kernel");
  return Status::Ok();
}

}  // namespace

Status indexer_logits_tma(const IndexerLogitsArgs& a, int64_t ld, Stream stream, bool wide,
                          const IndexerDevice& dev) {
  if (a.batch == 0 || a.max_len == 0) return Status::Ok();
  return wide ? launch_tma<true>(a, ld, stream, dev) : launch_tma<false>(a, ld, stream, dev);
}

}  // namespace mlakit::ops
