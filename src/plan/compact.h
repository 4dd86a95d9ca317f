// Sparse decode on the GPU backends: the top-k indices of each query token compacted on the
// device into the slots that are to be read, so that the decode kernels see a dense problem.
//
// Row r = request * s_q + token of the sparse problem has `topk` index slots, of which the first
// topk_lens[request] count (all when topk_lens is null). compact() keeps, in order, those that
// name a cached token (0 <= index < num_tokens), drops -1 and every other value (an index out of
// range is never read: issue 34), and writes the kept ones to slots[r, 0:count[r]]. With an extra
// cache (Problem::extra_topk), the kept extra indices follow the main ones in the same row, marked
// by kExtraSlot. The decode kernel then runs the rows as requests of one query token whose
// "length" is count[r] and whose token j is slots[r, j] (DecodeParams::gather). Order is kept, so
// results are deterministic.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mlakit/mlakit.h"

namespace mlakit::plan {

// Set in a slot of the extra cache (the rest is its token as for the main cache). A reader that
// takes an extra cache needs every main slot below it (launch.cc checks the tokens on the host).
inline constexpr int32_t kExtraSlot = int32_t{1} << 30;

// The slot of cached token `index` (page * page_size + offset) in a cache whose pages start
// page_pitch tokens apart: page * page_pitch + offset (CompactList::page_pitch). Shared by the
// compaction and sm90's split kernel reading indices as given (DecodeParams::direct_s_q).
__host__ __device__ inline int32_t pitched_slot(int32_t index, int32_t page_size,
                                                int32_t page_pitch) {
  return page_pitch == page_size ? index : index / page_size * page_pitch + index % page_size;
}

// One list of indices per row: the main one, or the extra cache's.
struct CompactList {
  const int32_t* indices;    // [rows, topk] (var_q: [total, topk], below)
  const int32_t* topk_lens;  // [rows / s_q] or null
  int64_t num_tokens;        // cached tokens: num_pages * page_size
  int32_t topk;
  // Tokens between the starts of two pages (page_size, or more with padded pages: the cache's
  // page stride over its token stride; sm90's V4 gather: the next power of two). A kept index
  // page * page_size + offset is written as page * page_pitch + offset, so that a reader
  // addressing slot s at s * the token stride finds it (sm90's gather). The bounds test is on the
  // index before this.
  int32_t page_size;
  int32_t page_pitch;
};

struct CompactParams {
  CompactList main;
  CompactList extra;  // topk 0: none
  // [rows / s_q + 1] with var_q, else null: row (request, t)'s indices are packed row
  // cu_seqlens_q[request] + t ([total, topk]), and a row with t >= q_len keeps none.
  const int32_t* cu_seqlens_q;
  int32_t* slots;    // [rows, main.topk + extra.topk] out: the kept slots, first count[r] of each
  int32_t* counts;   // [rows] out
  int32_t* dropped;  // optional [1]: incremented by the indices dropped as out of range
  int32_t s_q;
};

// The dense problem the plan and the decode kernels see for a sparse one: its rows (request, query
// token) as requests of one query token, each as long as its top-k (and its extra top-k); not
// causal. A dense problem
// unchanged but for its max_seq_len with context parallelism: the rank's longest local length
// (cp_local_max_seq_len), what its plan and workspace must cover.
Problem rows_as_requests(const Problem& problem);

// Workspace bytes of the compacted slots and counts for `rows` rows of `topk` (256-aligned parts).
size_t compact_bytes(int64_t rows, int32_t topk);
// The compaction of a sparse problem's run: its indices and lengths (and the extra cache's), its
// caches' tokens, and the slots and counts in `region` (compact_bytes(max_batch * s_q, topk +
// extra_topk) bytes). Slots are the indices themselves (page_pitch = page_size); a caller that
// reads padded pages by slot sets page_pitch (padded_page_pitch).
CompactParams compact_params(const Problem& problem, const RunArgs& args, void* region);

// The page pitches (in tokens) at which the V4 readers (sm90's gather, sm80's loader) take their
// slots, so that a slot's page and token are a shift and a mask: each cache's page size rounded up
// to a power of two (extra: 0 without an extra cache). Every slot, tagged by kExtraSlot for the
// extra cache, must stay below 2^30: an error naming num_pages (or extra_num_pages) otherwise.
Status v4_page_pitches(const Problem& problem, const RunArgs& args, std::string_view backend,
                       int32_t* main_pitch, int32_t* extra_pitch);

// The page pitch in tokens of a cache whose pages are `page_stride` apart and tokens
// `token_stride` (both in the same unit), for a reader that addresses slot s at s * token_stride:
// page_stride / token_stride when it divides and num_pages * that fits an int32 slot; 0 otherwise
// (such a cache cannot be read that way).
int32_t padded_page_pitch(int64_t page_stride, int64_t token_stride, int64_t num_pages);

// Launches the compaction of `rows` rows (one CTA each). With pdl it waits for the previous
// kernel before reading the indices (they may come from a top-k kernel).
Status launch_compact(const CompactParams& params, int64_t rows, cudaStream_t stream, bool pdl);

}  // namespace mlakit::plan
