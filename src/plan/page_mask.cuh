// Tokens in pages the block table does not name (issue 34). An entry outside [0, num_pages) in a
// used slot is never read (valid_page: the copies read nothing and fill zeros) and its tokens are
// masked out of the softmax, so the request's result is the one it would have without those tokens:
// a corrupted entry contributes nothing, whatever it holds. Decoder::check_data reports it.
//
// sm90: the producer warp reads every entry of a chunk anyway; it publishes each block's bits
// with the block (SmallStorage::bad_tokens, before the stage's first barrier) and the consumers
// read one shared-memory word a block. sm80: a consumer warp looks at every entry of its chunk
// once (chunk_has_bad_page: a load per 32 pages a lane, one vote); only in a chunk with a bad
// entry does it load the entries of each block after its scores and vote on them
// (bad_tokens_of_block). Loading and voting in every block, before the scores, cost 2-4% on
// sm90's wide tile and up to 8% on sm80's 64-row tile (H200,
// bench/results/2026-11-27-h200-page-mask).
#pragma once

#include <cstdint>

#include "plan/decode_params.h"

namespace mlakit::plan {

// MLAKIT_NO_PAGE_CHECKS (decode_params.h) removes the bits too; sm80 tests this constant.
#ifdef MLAKIT_NO_PAGE_CHECKS
inline constexpr bool kPageChecks = false;
#else
inline constexpr bool kPageChecks = true;
#endif

// Whether any block-table entry behind tokens [token_begin, token_end) of `table_row` is outside
// [0, num_pages). Warp-collective: every lane of the warp calls it and gets the answer.
__device__ __forceinline__ bool chunk_has_bad_page(const int32_t* table_row, int32_t token_begin,
                                                   int32_t token_end, int page_shift,
                                                   int32_t num_pages) {
#ifdef MLAKIT_NO_PAGE_CHECKS
  return false;
#endif
  const int32_t lane = static_cast<int32_t>(threadIdx.x % 32);
  const int32_t last = token_end > token_begin ? (token_end - 1) >> page_shift : -1;
  bool bad = false;
  for (int32_t i = (token_begin >> page_shift) + lane; i <= last; i += 32) {
    bad |= valid_page(table_row[i], num_pages) < 0;
  }
  return __any_sync(0xffffffffu, bad);
}

// Bit j set: token tok0 + j of the block of kTokens (32 or 64) tokens at tok0 lies in a page
// outside [0, num_pages); tokens at or past token_end count as good (they are masked by length).
// Lane j loads the entry of token tok0 + j (and + 32), then the warp votes. Warp-collective:
// every lane calls it and gets the whole block's bits. For a chunk known to hold a bad page: the
// loads' latency is paid there only.
template <int kTokens>
__device__ __forceinline__ uint64_t bad_tokens_of_block(const int32_t* table_row, int32_t tok0,
                                                        int32_t token_end, int page_shift,
                                                        int32_t num_pages) {
  static_assert(kTokens == 32 || kTokens == 64, "a warp votes on 32 tokens at a time");
#ifdef MLAKIT_NO_PAGE_CHECKS
  return 0;
#endif
  const int32_t lane = static_cast<int32_t>(threadIdx.x % 32);
  uint64_t bits = 0;
#pragma unroll
  for (int k = 0; k < kTokens / 32; ++k) {
    const int32_t tok = tok0 + lane + 32 * k;
    const int32_t id = tok < token_end ? table_row[tok >> page_shift] : 0;
    const uint32_t vote = __ballot_sync(0xffffffffu, valid_page(id, num_pages) < 0);
    bits |= uint64_t{vote} << (32 * k);
  }
  return bits;
}

// Whether token tok0 + j of a block is in a bad page (bits: sm90's SmallStorage::bad_tokens, or
// bad_tokens_of_block on sm80).
__device__ __forceinline__ bool bad_token(uint64_t bits, int32_t j) { return (bits >> j) & 1; }

}  // namespace mlakit::plan
