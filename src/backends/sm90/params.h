// The device parameters of the sm90 decode kernel: RunArgs and Problem lowered once per call into
// a compact struct passed by value (__grid_constant__, which TMA needs for its tensor maps).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "plan/decode_params.h"

namespace mlakit::sm90 {

// How the producer fills the KV stages (gather.cuh): TMA copies of pages named by the block
// table, or (sparse decode) a gather of single tokens named by compacted slots.
enum class Fill : int32_t {
  kPages = 0,      // TMA, kv_map
  kGather16 = 1,   // tokens of a 16-bit cache (576 elements of q's type), copied
  kGatherV32 = 2,  // tokens of the V3.2 blockwise cache (656 bytes), dequantized to q's type
  kGatherV4 = 3,   // tokens of the V4 cache (576 data + 8 scale bytes), dequantized to q's type
};

// What an instantiation of the 16-bit decode kernel widens in shared memory before its products
// (decode_kernel.cuh), each its own kernel so that the others' code stays as it was:
enum class Widen : int32_t {
  kNone = 0,    // nothing: the dense 16-bit cache, TMA-loaded page by page (Fill::kPages only)
  kV4 = 1,      // sparse decode of the V4 cache (gather.cuh)
  kFp8 = 2,     // the one-scale e4m3 cache, TMA-loaded, with a 16-bit q on the wide tile
  kGather = 3,  // sparse decode of the 16-bit and V3.2 caches: the producer warpgroup gathers
                // (gather.cuh), the V3.2 cache widened at run time (Fill::kGatherV32)
  kQSplit = 4,  // the one-scale e4m3 cache with a 16-bit q on the e4m3 wide tile: q split into two
                // e4m3 parts by the launch (pack_q.h, split_q), P into two in the kernel
  kInStep = 5,  // the one-scale e4m3 cache with an e4m3 q on the in-step wide tile
                // (decode_fp8_instep.cuh): nothing widened, a schedule of its own
};

using GatherCache = plan::V4Cache;  // a V4 cache as the gather reads it (Fill::kGatherV4)

struct DecodeParams : plan::DecodeParamsBase {
  // q [b * s_q * h_q rows, 576], boxes of 64 (or the narrow tile's) rows x 64 columns, swizzle
  // 128B (64B for e4m3): q's rows when they are equally spaced (one row stride), else its copy
  // packed into the workspace (launch.cc).
  CUtensorMap q_map;
  // 1: var_q with q read where it lies (launch.cc, q_in_place): the kernels' request k's row r is
  // q row (cu_seqlens_q[i] + t0) h_q + r (out_view.request_token(k) = (i, t0)); a tile past the
  // request's live rows reads none (gather.cuh, issue_q). 0: row k * rows + r.
  int32_t q_in_place;
  // Widen::kQSplit: row r of q_map holds q's row times 2^k as two e4m3 parts, the high one in
  // bytes 0..575 and the residual in 576..1151 (pack_q.h); q_row_scale[r] = 2^-k. Else null.
  const float* q_row_scale;
  // The cache, boxes of min(page, 64) tokens x 64 columns: 2-D [num_pages * page_size rows, 576]
  // when its tokens are equally spaced (kv_paged 0: the contiguous cache and padded tokens), else
  // 3-D [num_pages, page_size, 576] with the page and token strides (kv_paged 1: padded pages).
  CUtensorMap kv_map;
  // Sparse decode (Fill::kGather*): block_table holds each row's compacted slots (plan/compact.h),
  // block_table_stride = topk, seq_lens their counts; requests are rows of one query token.
  const uint8_t* kv_cache;
  plan::KvView kv_view;  // sparse: where a slot's token lies in kv_cache, in bytes
  // Fill::kGatherV4: the main cache ([0]) and the extra one ([1]: slots with plan::kExtraSlot).
  GatherCache v4[2];
  Fill fill;
  int32_t kv_paged;
  // The split sparse kernel's cluster schedule (decode_sparse_v32.cuh) reads a row's indices as
  // they are when direct_s_q > 0 (no compaction: block_table = indices [b * s_q rows, topk],
  // seq_lens = topk_lens [b] or null for topk each, row r's length that of request r / direct_s_q)
  // and compacted slots when 0. Either way it reads a token only when 0 <= index < direct_tokens
  // (else zeros, masked; INT32_MAX with compacted slots), at slot index / direct_page_size *
  // direct_page_pitch + index % direct_page_size (padded pages; both 1 with compacted slots).
  int32_t direct_s_q;
  int32_t direct_tokens;
  int32_t direct_page_size;
  int32_t direct_page_pitch;
};

}  // namespace mlakit::sm90
