// The sm90 decode kernel's producer warp (decode_kernel.cuh): the Q tile and each block's column
// chunks by TMA, through the stage ring of the tile's shared-memory plan; and, in trace builds, a
// second warp stamping when blocks land.
#pragma once

#include <cuda/ptx>

#include "backends/sm90/config.h"
#include "backends/sm90/device.cuh"
#include "backends/sm90/gather.cuh"
#include "backends/sm90/params.h"
#include "backends/sm90/trace.cuh"
#include "plan/work.cuh"

namespace mlakit::sm90 {

#ifdef MLAKIT_SM90_WGMMA

// The producer warp: walks the same chunks as the consumers and keeps the stages full. L: the
// shared-memory plan (Layout, Fp8Layout): stages, chunk sizes, how stages come back.
// kRawFp8 (Widen::kFp8): the e4m3 cache's column chunks (64 tokens x 64 bytes in the 64-byte
// swizzle, the cache's tensor map) land in the second half of a 16-bit stage, where widen_fp8
// widens them in place into the stage's 16-bit chunks.
template <typename L, int kTileRows, bool kRawFp8 = false>
__device__ __forceinline__ void produce(const DecodeParams& p, const Smem& s, int m_tile,
                                        int32_t cta) {
  constexpr int kChunk = kRawFp8 ? kFp8RawChunkBytes : L::kKvChunkBytes;  // bytes a column chunk
  constexpr int kChunkAt = kRawFp8 ? kFp8RawOffset : 0;  // where the chunks start in the stage
  const int lane = static_cast<int>(threadIdx.x) % 32;
  SmallStorage& sm = *s.small;
  const int page_size = 1 << p.page_shift;
  const bool two_pages = page_size < kBlockN;  // page 32: two pages per block
  const int32_t row0 = m_tile * kTileRows;
  plan::ChunkIterator chunks(p.plan, p.schedule, cta, p.batch, &sm.part, p.seq_lens, p.max_len);
  chunks.skip_dead_tiles(p.out_view, row0);  // var_q
  plan::Chunk c;
  uint32_t n_chunk = 0, n_block = 0;
  while (chunks.next(&c)) {
    // Lane j issues chunk j (one thread issuing all nine spent ~200 cycles a chunk).
    issue_q<L, kTileRows>(p, s, c, row0, n_chunk, lane);
    ++n_chunk;
    const int32_t* table = p.block_table + c.request * p.block_table_stride;
    const int32_t first_page = c.token_begin >> p.page_shift;
    const int32_t last_page = (c.token_end - 1) >> p.page_shift;
    int32_t window = -1, ids = 0;
    for (int32_t tok0 = c.token_begin; tok0 < c.token_end; tok0 += kBlockN, ++n_block) {
      // The page ids of the chunk, 32 at a time, one per lane. A block's pages share a window:
      // with page 32 its first page is even.
      const int32_t page = (tok0 >> p.page_shift) - first_page;
      if (page / 32 != window) {
        window = page / 32;
        const int32_t at = first_page + window * 32 + lane;
        // An id out of range becomes -1: its TMA rows lie before the cache and read as zeros.
        ids = at <= last_page ? plan::valid_page(table[at], p.num_pages) : 0;
      }
      const int32_t id0 = __shfl_sync(0xffffffffu, ids, page % 32);
      const int32_t id1 = __shfl_sync(0xffffffffu, ids, (page + 1) % 32);
      const uint32_t stage = n_block % L::kStages, phase = (n_block / L::kStages) & 1;
      if constexpr (!L::kReleasePerChunk) {
        if (lane == 0) wait_parity(&sm.empty[stage], phase ^ 1);
      } else if (lane < kQkChunks) {
        wait_parity(&sm.chunk_empty[stage][lane], phase ^ 1);  // narrow: chunk by chunk
      }
      __syncwarp();
      trace(2, 8);
      // Lane 0 publishes the tokens of bad pages (-1 ids: the whole block, or with page 32 each
      // half; past the chunk's end they are masked anyway) for the consumers' mask
      // (plan/page_mask.cuh), before its arrival on the stage's chunk-0 barrier, which every
      // consumer waits for before it reads them.
#ifndef MLAKIT_NO_PAGE_CHECKS
      if (lane == 0) {
        const uint32_t bad_lo = id0 < 0 ? ~0u : 0u;
        const uint32_t bad_hi = two_pages ? (id1 < 0 ? ~0u : 0u) : bad_lo;
        sm.bad_tokens[stage] = (uint64_t{bad_hi} << 32) | bad_lo;
      }
#endif
      // Lane j issues column chunk j onto its own barrier. With two pages the second is loaded
      // only when the chunk reaches it (past the length the block table may hold anything); its
      // rows are then masked and zeroed as V.
      if (lane < kQkChunks) {
        const bool second = two_pages && tok0 + page_size < c.token_end;
        const uint32_t bytes = two_pages && !second ? kChunk / 2 : kChunk;
        uint8_t* dst = s.kv + stage * L::kStageBytes + kChunkAt + lane * kChunk;
        const int32_t offset = tok0 & (page_size - 1);
        uint64_t* bar = &sm.full[stage][lane];
        (void)cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta,
                                                   cuda::ptx::space_shared, bar, bytes);
        if (p.kv_paged) {
          // Padded pages (params.h): (token in page, page) coordinates; page -1 reads zeros.
          tma_load_3d(dst, &p.kv_map, lane * kChunkElems, offset, id0, bar);
          if (second) tma_load_3d(dst + kChunk / 2, &p.kv_map, lane * kChunkElems, 0, id1, bar);
        } else {
          tma_load_2d(dst, &p.kv_map, lane * kChunkElems, (id0 << p.page_shift) + offset, bar);
          if (second) {
            tma_load_2d(dst + kChunk / 2, &p.kv_map, lane * kChunkElems, id1 << p.page_shift, bar);
          }
        }
      }
      __syncwarp();
    }
  }
}

#ifdef MLAKIT_SM90_TRACE
// Trace only: a second producer warp stamps when the first and the last column chunk of each
// block have landed (waiting does not consume the barriers' phases).
template <typename L>
__device__ __forceinline__ void watch(const DecodeParams& p, const Smem& s, int32_t row0,
                                      int32_t cta) {
  SmallStorage& sm = *s.small;
  plan::ChunkIterator chunks(p.plan, p.schedule, cta, p.batch, &sm.part, p.seq_lens, p.max_len);
  chunks.skip_dead_tiles(p.out_view, row0);  // var_q
  plan::Chunk c;
  uint32_t n_block = 0;
  while (chunks.next(&c)) {
    for (int32_t tok0 = c.token_begin; tok0 < c.token_end; tok0 += kBlockN, ++n_block) {
      const uint32_t stage = n_block % L::kStages, phase = (n_block / L::kStages) & 1;
      wait_parity(&sm.full[stage][0], phase);
      trace(3, 9);
      wait_parity(&sm.full[stage][kQkChunks - 1], phase);
      trace(3, 10);
    }
  }
}
#endif

#endif  // MLAKIT_SM90_WGMMA

}  // namespace mlakit::sm90
