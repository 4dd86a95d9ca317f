// The lightning indexer's logits on sm_90 with persistent CTAs (ops.h, indexer_logits;
// indexer.h): one CTA an SM, each taking an equal share of the whole call's key tiles.
//
// Work: a unit is a request's group of query rows (as many of next_n as fit in shared memory,
// twice: see below); its tiles are the 64-position key tiles its last row sees, in segments of
// four (one a consumer warpgroup). The segments of all units, in order, are split evenly over the
// grid (a CTA's share may start and end inside a unit); each CTA finds its first segment by a
// block-wide scan of the units' segment counts (from the lengths, on the device: no metadata, no
// workspace, graph-capturable).
//
// Roles, as in indexer_tma.cu's wide shape: four producer warps stream key tiles (TMA boxes and
// bulk-copied scales) into a ring of 8 or 16 stages; consumer warpgroup g takes tile g of each
// segment, which producer warp g fills, so stage s is always filled by warp s % 4 and emptied by
// warpgroup s % 4. A unit's query heads come by TMA (a box of `heads` rows a query row, the
// 128-byte swizzle wgmma reads; head rows past `heads` stay zero) and its weights by producer
// warp 0's loads, into one of two slots: the slot of the CTA's unit v is loaded once every
// warpgroup has released unit v - 2's, so the next unit's heads arrive while the current one is
// computed. A consumer's tile: wgmma e4m3 with the positions as M and the heads as N, then the
// sums of indexer_device.cuh. The kernel is instantiated per unit shape (kBlocks): one row of one
// 64-head block (next_n 1 with up to 64 heads): one m64n64k32 product a tile, the thread's 16
// weights in registers; two rows of one block (next_n 2 with up to 64 heads): one m64n128k32
// product, row 0's weights in registers, row 1's from shared memory; two blocks (one row of 65 to
// 128 heads): one m64n128k32 product; any other shape: tile_logits_wide's loop. The quad's sums
// are scattered (indexer_device::quad_scatter, quad_scatter2: each quad lane ends with one value,
// a row's sum at one of the quad's two positions); tiles whose positions every row sees and whose
// boxes were all read store it without tests; the others set -inf where a row does not see a
// position or its box was not read. Positions past a unit's tiles are set to -inf after the main
// loop, in pieces of 4096 spread over the grid's warps.
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
#include "ops/indexer/indexer_persistent.cuh"

namespace mlakit::ops {
namespace {

using namespace indexer_persistent;  // NOLINT(google-build-using-namespace): its own pieces

// kBlocks: where every unit has the same shape, its own straight path: 1 (one row of one 64-head
// block: one m64n64 product), 2 (one row of two blocks: one m64n128 product) or 3 (two rows of one
// block: one m64n128 product, row 0's weights in registers); else 0 (tile_logits_wide's loop over
// any).
template <int kBlocks>
__global__ void __launch_bounds__(kThreads, 1)
    indexer_persistent_kernel(const __grid_constant__ PersistParams p) {
#if defined(__CUDA_ARCH__) && !defined(MLAKIT_SM90_WGMMA)
  __trap();  // sm_90 code without the "a" features (the host takes this kernel only with them)
#else
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - ptx::smem_u32(smem_raw) % 1024) % 1024);
  const int hgroups = (p.heads + kWgHeads - 1) / kWgHeads;
  const int hp = hgroups * kWgHeads;
  const int stages = p.stages;
  const int q_slot_bytes = p.rows_per_unit * hp * kIndexerDim;
  const PersistLayout l = persist_layout_of(stages, p.rows_per_unit, hp);
  uint8_t* ks = smem + l.keys;
  uint8_t* qs = smem + l.q;
  float* ss = reinterpret_cast<float*>(smem + l.scales);
  float* ws = reinterpret_cast<float*>(smem + l.w);
  uint32_t* masks = reinterpret_cast<uint32_t*>(smem + l.mask);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + l.full);
  uint64_t* empty = reinterpret_cast<uint64_t*>(smem + l.empty);
  uint64_t* qfull = reinterpret_cast<uint64_t*>(smem + l.qfull);
  uint64_t* qempty = reinterpret_cast<uint64_t*>(smem + l.qempty);
  int64_t* scan = reinterpret_cast<int64_t*>(smem + l.scan);
  auto wait_parity = [](uint64_t* bar, uint32_t parity) { mbarrier_wait_parity(bar, parity); };

  if (threadIdx.x == 0) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(&p.keys) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(&p.queries) : "memory");
    for (int s = 0; s < stages; ++s) {
      cuda::ptx::mbarrier_init(&full[s], 1);     // the producer's arrival and the bytes
      cuda::ptx::mbarrier_init(&empty[s], 128);  // the consuming warpgroup's threads
    }
    for (int s = 0; s < 2; ++s) {
      cuda::ptx::mbarrier_init(&qfull[s], 32);  // producer warp 0's lanes and the bytes
      cuda::ptx::mbarrier_init(&qempty[s], kConsumers * 128);  // every consumer thread
    }
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
  }
  // Head rows past `heads` are never written by the boxes: zero (wgmma reads them).
  for (int c = threadIdx.x; c < 2 * q_slot_bytes / 16; c += kThreads) {
    reinterpret_cast<uint4*>(qs)[c] = make_uint4(0, 0, 0, 0);
  }
  cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);
  pdl::griddepcontrol_wait();  // q, weights, the cache or the lengths may come from the appends

  // The CTA's share [seg_begin, seg_end) of all units' segments, and its first unit and segment:
  // the first pass sums the segments; the second finds the unit holding seg_begin (skipped when
  // the units fit one pass: the first pass's prefix is kept).
  const int64_t units = int64_t{p.batch} * p.row_groups;
  int64_t total = 0, x0 = 0, excl0 = 0;
  for (int64_t base = 0; base < units; base += kThreads) {
    const int64_t u = base + threadIdx.x;
    const int64_t x = u < units ? unit_of<false>(p, u).segs : 0;
    int64_t chunk_total;
    const int64_t excl = block_exclusive_scan(x, scan, &chunk_total);
    if (base == 0) {
      x0 = x;
      excl0 = excl;
    }
    total += chunk_total;
  }
  total = __shfl_sync(0xffffffffu, total, 0);  // the same in every thread: make it warp-uniform
  const int64_t seg_begin = total * blockIdx.x / gridDim.x;
  const int64_t count = total * (blockIdx.x + 1) / gridDim.x - seg_begin;
  if (count > 0 && units <= kThreads) {
    if (excl0 <= seg_begin && seg_begin < excl0 + x0) {
      scan[kWarps] = threadIdx.x;
      scan[kWarps + 1] = seg_begin - excl0;
    }
  } else if (count > 0) {
    int64_t before = 0;
    for (int64_t base = 0; before <= seg_begin; base += kThreads) {  // uniform: before is shared
      const int64_t u = base + threadIdx.x;
      const int64_t x = u < units ? unit_of<false>(p, u).segs : 0;
      int64_t chunk_total;
      const int64_t excl = before + block_exclusive_scan(x, scan, &chunk_total);
      if (excl <= seg_begin && seg_begin < excl + x) {
        scan[kWarps] = u;
        scan[kWarps + 1] = seg_begin - excl;
      }
      before += chunk_total;
    }
  }
  __syncthreads();  // the barriers' initialization, the zeroed heads, the first unit
  const int64_t u0 = __shfl_sync(0xffffffffu, count > 0 ? scan[kWarps] : 0, 0);
  const int k0 = __shfl_sync(0xffffffffu, count > 0 ? static_cast<int>(scan[kWarps + 1]) : 0, 0);

  // The warp index through a shuffle from lane 0: the compiler then knows it is the same across
  // the warp and keeps what derives from it (stages, phases, descriptors) in uniform registers.
  const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 32), 0);
  const int lane = threadIdx.x % 32;
  if (count > 0 && warp >= kConsumers * 4) {
    // Producer warp w: tile w of each segment (n = 4 kk + w), page ids read 32 boxes ahead a
    // lane each (indexer_tma.cu), from each unit's start; warp 0 also loads the units' heads.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    const int w = warp - kConsumers * 4;
    const int boxes = kTile / p.box_rows;
    int s = w, issued = 0, visit = 0;
    uint32_t round = 0;
    int64_t u = u0, remaining = count;
    int k = k0;
    while (remaining > 0) {
      const Unit x = unit_of<true>(p, u);
      const int take = static_cast<int>(min(remaining, int64_t{x.segs - k}));
      if (take > 0) {
        if (w == 0) {
          const int slot = visit & 1;
          if (visit >= 2) wait_parity(&qempty[slot], ((visit >> 1) & 1) ^ 1);
          const int64_t row0 = int64_t{x.i} * p.next_n + x.t0;
          float* wd = ws + slot * p.rows_per_unit * hp;
          for (int c = lane; c < x.rows * hp; c += 32) {
            const int r = c / hp, h = c % hp;
            wd[c] = h < p.heads ? p.weights[(row0 + r) * p.heads + h] : 0.f;
          }
          // Every lane arrives after its own stores of weights (lane 0 with the heads' bytes,
          // before any box is issued).
          if (lane == 0) {
            (void)cuda::ptx::mbarrier_arrive_expect_tx(
                cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared, &qfull[slot],
                static_cast<uint32_t>(x.rows * p.heads * kIndexerDim));
          }
          __syncwarp();
          if (lane > 0) (void)cuda::ptx::mbarrier_arrive(&qfull[slot]);
          if (lane < x.rows) {
            const int32_t coords[2] = {0, static_cast<int32_t>((row0 + lane) * p.heads)};
            cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global,
                                            qs + slot * q_slot_bytes + lane * hp * kIndexerDim,
                                            &p.queries, coords, &qfull[slot]);
          }
        }
        const int32_t* pages = p.block_table + int64_t{x.i} * p.block_table_stride;
        const int k_end = k + take;
        // The warp's box e in this unit (tile 4 (k + e / boxes) + w, box e % boxes): page id
        // (-1 past the length or the share) and offset in the page.
        auto box_at = [&](int e, int32_t* page, int32_t* off) {
          const int kk = k + e / boxes;
          const int j = (kSegTiles * kk + w) * kTile + (e % boxes) * p.box_rows;
          const int index = j / p.page_size;
          *page = kk < k_end && j < x.len ? pages[index] : -1;
          *off = j - index * p.page_size;
        };
        int32_t page_now, off_now, page_next, off_next;
        box_at(lane, &page_now, &off_now);
        box_at(32 + lane, &page_next, &off_next);
        for (int kk = k, e0 = 0; kk < k_end; ++kk, e0 += boxes) {
          if (kSegTiles * kk + w >= x.tiles) break;
          if (e0 > 0 && e0 % 32 == 0) {  // the next batch of 32 boxes
            page_now = page_next;
            off_now = off_next;
            box_at(e0 + 32 + lane, &page_next, &off_next);
          }
          const int src = (e0 + lane) % 32;  // lane < boxes: this lane's box
          const int32_t page = __shfl_sync(0xffffffffu, page_now, src);
          const int32_t off = __shfl_sync(0xffffffffu, off_now, src);
          if (issued >= stages / kProducers) wait_parity(&empty[s], round ^ 1);
          indexer_device::issue_tile(p, lane, boxes, page, off, ks + s * kKeyBytes, ss + s * kTile,
                                     &masks[s], &full[s]);
          ++issued;
          s += kProducers;
          if (s >= stages) {
            s -= stages;
            round ^= 1;
          }
        }
        ++visit;
      }
      remaining -= take;
      ++u;
      k = 0;
    }
  } else if (count > 0) {
    // Consumer warpgroup g: tile g of each segment, as the wide shape computes it.
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    const int g = warp / 4, wt = threadIdx.x % 128;
    const int quad = lane / 4, tg = lane % 4;
    const int pos_lo = 16 * (wt / 32) + quad, pos_hi = pos_lo + 8;  // the thread's positions
    const int box_lo = pos_lo / p.box_rows, box_hi = pos_hi / p.box_rows;
    const uint32_t full_mask = (1u << (kTile / p.box_rows)) - 1;  // every box of a tile read
    const int max_len = static_cast<int>(p.max_len);
    const uint64_t desc_k = sm90::smem_desc_sw128(ptx::smem_u32(ks), 0, 1024);
    int s = g, visit = 0;
    uint32_t round = 0;
    int64_t u = u0, remaining = count;
    int k = k0;
    while (remaining > 0) {
      const Unit x = unit_of<true>(p, u);
      const int take = static_cast<int>(min(remaining, int64_t{x.segs - k}));
      if (take > 0) {
        // Warp-uniform (a shuffle from lane 0): the heads' descriptors then stay out of the
        // vector registers (fewer R2UR moves a tile).
        const int slot = __shfl_sync(0xffffffffu, visit & 1, 0);
        wait_parity(&qfull[slot], (visit >> 1) & 1);
        const uint64_t desc_q =
            sm90::smem_desc_sw128(ptx::smem_u32(qs + slot * q_slot_bytes), 0, 1024);
        const float* wsl = ws + slot * p.rows_per_unit * hp;
        const float* w_thread = wsl + 2 * tg;  // the thread's weights (add_heads_at)
        // Plain tiles: every position visible to every row of the unit (row 0 sees the fewest),
        // so where all their boxes were read no position needs -inf. There quad lane tg stores
        // the quad's value tg: row tg / 2, position pos_lo + 8 (tg % 2) (one store a thread, no
        // branch). Other tiles (a unit's last ones, or one with a page id out of range) test
        // each position (store_lane; the general shape's store_edge), reading the unit's lengths
        // back from shared memory.
        const int plain_tiles = max(0, x.vis0) / kTile;  // vis0 <= len
        float* const out_q = p.logits + (int64_t{x.i} * p.next_n + x.t0) * p.ld + pos_lo +
                             (tg & 1) * 8 + (tg >> 1) * p.ld;
        // The unit's length and row 0's visible length for the edge tiles' stores, in the warp's
        // slot of the scan's scratch (free since the scan).
        __syncwarp();  // the warp's reads of the last unit's values are done
        if (lane == 0) *reinterpret_cast<int2*>(&scan[warp]) = make_int2(x.len, x.vis0);
        __syncwarp();
        // A tile's per-thread state, read before its stage goes back: the box mask and the
        // scales of the thread's two positions.
        struct Tile {
          uint32_t mask;
          float s_lo, s_hi;
        };
        auto tile_at = [&](int st) {
          return Tile{masks[st], ss[st * kTile + pos_lo], ss[st * kTile + pos_hi]};
        };
        auto plain = [&](const Tile& t, int tn) { return tn < plain_tiles && t.mask == full_mask; };
        // Row r's sums of tile tn into its logits (tg 0 of each quad), -inf where a position is
        // not visible to the row or its box was not read.
        auto store_edge = [&](const Tile& t, int tn, int r, float v_lo, float v_hi) {
          if (tg == 0) {
            float* o = out_q - pos_lo + r * p.ld;  // tg 0: out_q is row 0's pos_lo
            const int2 lv = *reinterpret_cast<const int2*>(&scan[warp]);
            const int vis = min(lv.x, lv.y + r), j_lo = tn * kTile + pos_lo, j_hi = j_lo + 8;
            const bool ok_lo = ((t.mask >> box_lo) & 1) != 0, ok_hi = ((t.mask >> box_hi) & 1) != 0;
            if (j_lo < max_len) o[j_lo] = j_lo < vis && ok_lo ? v_lo : -INFINITY;
            if (j_hi < max_len) o[j_hi] = j_hi < vis && ok_hi ? v_hi : -INFINITY;
          }
        };
        // Row r's sums of tile tn: quad lanes 0 and 1 store a plain tile's two values.
        auto store_row = [&](const Tile& t, int tn, int r, float v_lo, float v_hi) {
          if (plain(t, tn)) {
            if (tg < 2) out_q[tn * kTile + r * p.ld] = tg == 0 ? v_lo : v_hi;
          } else {
            store_edge(t, tn, r, v_lo, v_hi);
          }
        };
        // The lane's value v of tile tn (quad_scatter / quad_scatter2): row tg / 2 (rows > 1) or
        // row 0 (lanes tg < 2 store), position pos_lo + 8 (tg % 2).
        auto store_lane = [&](const Tile& t, int tn, int rows, float v) {
          if (rows == 1 && tg >= 2) return;
          if (plain(t, tn)) {
            out_q[tn * kTile] = v;
          } else {
            const int2 lv = *reinterpret_cast<const int2*>(&scan[warp]);
            const int vis = min(lv.x, lv.y + (tg >> 1));
            const int j = tn * kTile + pos_lo + 8 * (tg & 1);
            const bool ok = ((t.mask >> ((tg & 1) ? box_hi : box_lo)) & 1) != 0;
            if (j < max_len) out_q[tn * kTile] = j < vis && ok ? v : -INFINITY;
          }
        };
        auto next_stage = [&](int st, uint32_t* rd) {
          st += kConsumers;
          if (st >= stages) {
            st -= stages;
            *rd ^= 1;
          }
          return st;
        };
        // Shapes 1 and 3: the thread's 16 weights of row 0 (its only row in shape 1) in
        // registers.
        float wr[16];
        if constexpr (kBlocks == 1 || kBlocks == 3) {
#pragma unroll
          for (int nb = 0; nb < 8; ++nb) {
            const float2 w2 = *reinterpret_cast<const float2*>(w_thread + 8 * nb);
            wr[2 * nb] = w2.x;
            wr[2 * nb + 1] = w2.y;
          }
        }
        for (int kk = k; kk < k + take;) {
          const int n = kSegTiles * kk + g;
          if (n >= x.tiles) break;
          s = __shfl_sync(0xffffffffu, s, 0);  // uniform: the stage's addresses and descriptors
          if constexpr (kBlocks == 1) {
            float d[32];
            wait_parity(&full[s], round);
            const Tile t = tile_at(s);
            indexer_device::products(indexer_device::desc_at(desc_k, s * kKeyBytes), desc_q, d);
            const bool pos = indexer_device::all_positive(t.s_lo, t.s_hi);
            sm90::wgmma_wait_group<0>();
            sm90::fence_accumulators(d);
            (void)cuda::ptx::mbarrier_arrive(&empty[s]);
            float lo = 0.f, hi = 0.f;
            indexer_device::add_heads_w(d, wr, pos, t.s_lo, t.s_hi, &lo, &hi);
            store_lane(t, n, 1, indexer_device::quad_scatter(pos, t.s_lo, t.s_hi, lo, hi));
          } else if constexpr (kBlocks == 2 || kBlocks == 3) {
            // One m64n128k32 product: two 64-head blocks side by side (row 0's and row 1's
            // heads, or one row's 65 to 128). Shape 3 keeps row 0's weights in registers (both
            // rows' made ptxas spill 244 bytes in the loop; two m64n64 products one after the
            // other with both in registers, the nineteenth session's shape 3, was 1-7% slower
            // from batch 32 on an H200).
            float d[64];
            wait_parity(&full[s], round);
            const Tile t = tile_at(s);
            indexer_device::products128(indexer_device::desc_at(desc_k, s * kKeyBytes), desc_q, d);
            const bool pos = indexer_device::all_positive(t.s_lo, t.s_hi);
            sm90::wgmma_wait_group<0>();
            sm90::fence_accumulators(d);
            (void)cuda::ptx::mbarrier_arrive(&empty[s]);
            float lo0 = 0.f, hi0 = 0.f, lo1 = 0.f, hi1 = 0.f;
            if constexpr (kBlocks == 3) {
              indexer_device::add_heads_w(d, wr, pos, t.s_lo, t.s_hi, &lo0, &hi0);
            } else {
              indexer_device::add_heads_at(d, w_thread, pos, t.s_lo, t.s_hi, &lo0, &hi0);
            }
            indexer_device::add_heads_at(d + 32, w_thread + kWgHeads, pos, t.s_lo, t.s_hi, &lo1,
                                         &hi1);
            if (kBlocks == 2 && hgroups == 2) {  // one row of two blocks (always, from the host)
              store_lane(t, n, 1,
                         indexer_device::quad_scatter(pos, t.s_lo, t.s_hi, lo0 + lo1, hi0 + hi1));
            } else {
              store_lane(t, n, 2,
                         indexer_device::quad_scatter2(pos, t.s_lo, t.s_hi, lo0, hi0, lo1, hi1));
            }
          } else {
            wait_parity(&full[s], round);
            const Tile t = tile_at(s);
            indexer_device::tile_logits_wide(
                indexer_device::desc_at(desc_k, s * kKeyBytes), desc_q, wsl, hgroups, x.rows,
                t.s_lo, t.s_hi,
                [&](int r, float v_lo, float v_hi) { store_row(t, n, r, v_lo, v_hi); },
                [&] { (void)cuda::ptx::mbarrier_arrive(&empty[s]); });
          }
          s = next_stage(s, &round);
          ++kk;
        }
        (void)cuda::ptx::mbarrier_arrive(&qempty[slot]);  // the unit's heads and weights read
        ++visit;
      }
      remaining -= take;
      ++u;
      k = 0;
    }
  }

  // Positions past each unit's tiles: -inf, in pieces spread over the grid's warps (a warp a
  // piece: with the CTA's threads on one piece every warp worked out each piece's unit, about 3%
  // of the kernel's issued instructions at 32 x 128K next_n 2 where nothing was left to fill).
  const int64_t pieces = (p.max_len + kFillPiece - 1) / kFillPiece;
  const int64_t warps = int64_t{gridDim.x} * kWarps;
  for (int64_t c = blockIdx.x + int64_t{gridDim.x} * warp; c < units * pieces; c += warps) {
    const Unit x = unit_of<true>(p, c / pieces);
    const int64_t piece = c % pieces * kFillPiece;
    const int64_t begin = max(piece, int64_t{x.tiles} * kTile);
    const int64_t end = min(piece + kFillPiece, p.max_len);
    float* const out = p.logits + (int64_t{x.i} * p.next_n + x.t0) * p.ld;
    for (int r = 0; r < x.rows; ++r) {
      for (int64_t j = begin + lane; j < end; j += 32) out[r * p.ld + j] = -INFINITY;
    }
  }
  pdl::griddepcontrol_launch_dependents();
#endif
}

}  // namespace

Status indexer_logits_persistent(const IndexerLogitsArgs& a, int64_t ld, Stream stream,
                                 const IndexerDevice& dev) {
  if (a.batch == 0 || a.max_len == 0) return Status::Ok();
  MLAKIT_RETURN_IF_ERROR(indexer_device::check_tma_call(
      a, "the persistent indexer kernel", dev.major, binary_version(indexer_persistent_kernel<0>),
      /*need_q=*/true));
  const int hp = (a.heads + kWgHeads - 1) / kWgHeads * kWgHeads;
  const int per_row = 2 * hp * (kIndexerDim + 4);  // two slots
  int stages = kMaxStages;
  if (dev.smem_optin - persist_layout_of(stages, 1, hp).bytes < 0) stages = kMinStages;
  const int budget = dev.smem_optin - persist_layout_of(stages, 0, hp).bytes;
  if (budget < per_row) {
    return unsupported("heads ", a.heads, " for the persistent indexer kernel: ",
                       persist_layout_of(stages, 1, hp).bytes,
                       " bytes of shared memory a block needed, ", dev.smem_optin, " available");
  }
  PersistParams p{};
  const int64_t page_bytes = static_cast<int64_t>(indexer_page_bytes(a.page_size));
  MLAKIT_RETURN_IF_ERROR(indexer_device::encode_keys_map(a, page_bytes, &p.keys));
  {
    PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
    MLAKIT_RETURN_IF_ERROR(tensor_map_encoder(&encode));
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(kIndexerDim),
                                static_cast<cuuint64_t>(int64_t{a.batch} * a.next_n * a.heads)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(kIndexerDim)};
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(kIndexerDim),
                               static_cast<cuuint32_t>(a.heads)};
    const cuuint32_t element_strides[2] = {1, 1};
    const CUresult r = encode(
        &p.queries, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(a.q), dims, strides, box,
        element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
      return Status(StatusCode::kInternal,
                    str_cat("indexer_logits: cuTensorMapEncodeTiled failed for q (CUresult ",
                            static_cast<int>(r), ")"));
    }
  }
  indexer_device::fill_common(a, ld, page_bytes, &p);
  p.box_rows = std::min(a.page_size, kTile);
  p.batch = a.batch;
  p.rows_per_unit = std::min(a.next_n, budget / per_row);
  p.row_groups = (a.next_n + p.rows_per_unit - 1) / p.rows_per_unit;
  p.stages = stages;
  const int smem_bytes = persist_layout_of(stages, p.rows_per_unit, hp).bytes;
  // Every unit has rows_per_unit rows where they divide next_n: then one or two 64-head blocks
  // take their own straight path (kBlocks above).
  const int hgroups = hp / kWgHeads;
  const bool uniform = a.next_n % p.rows_per_unit == 0;  // (always with one row a unit)
  const bool two_rows = uniform && p.rows_per_unit == 2 && hgroups == 1;
  auto* kernel = p.rows_per_unit == 1 && hgroups == 1   ? indexer_persistent_kernel<1>
                 : two_rows                             ? indexer_persistent_kernel<3>
                 : p.rows_per_unit == 1 && hgroups == 2 ? indexer_persistent_kernel<2>
                                                        : indexer_persistent_kernel<0>;
  MLAKIT_CUDA_RETURN(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  MLAKIT_CUDA_RETURN(pdl::launch(kernel, dim3(dev.sms), dim3(kThreads), smem_bytes,
                                 static_cast<cudaStream_t>(stream), a.enable_pdl, p));
  MLAKIT_CUDA_RETURN_LAUNCH("indexer_persistent_kernel");
  return Status::Ok();
}

}  // namespace mlakit::ops
