// Tokens in pages the block table does not name (issue 34). An entry outside [0, num_pages) in a
// used slot is never read (valid_page: the copies read nothing and fill zeros) and its tokens are
// masked out of the softmax, so the request's result is the one it would have without those tokens:
// a corrupted entry contributes nothing, whatever it holds. Decoder::check_data reports it.
//
// A consumer warp loads the entries of its block early (the producer has just read them: they are
// in L1 or L2) and votes on them after its scores: two loads and two votes per block of 64 tokens,
// one of each per block of 32. The mask itself runs only when a vote found a bad page.
#pragma once

#include <cstdint>

#include "plan/decode_params.h"

namespace mlakit::plan {

// The block-table entries behind a block of kTokens (32 or 64) tokens starting at tok0: lane j of
// a warp holds the entry of token tok0 + j (and tok0 + j + 32).
template <int kTokens>
struct BlockPages {
  static_assert(kTokens == 32 || kTokens == 64, "a warp votes on 32 tokens at a time");
  static constexpr int kLoads = kTokens / 32;
  int32_t id[kLoads] = {};

  // Loads the entries of `table_row` (the request's row of the block table); tokens at or past
  // token_end read none (they are masked by length and count as good here).
  __device__ __forceinline__ void load(const int32_t* table_row, int32_t tok0, int32_t token_end,
                                       int page_shift) {
#ifdef MLAKIT_NO_PAGE_CHECKS
    return;
#endif
    const int32_t lane = static_cast<int32_t>(threadIdx.x % 32);
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const int32_t tok = tok0 + lane + 32 * k;
      id[k] = tok < token_end ? table_row[tok >> page_shift] : 0;
    }
  }

  // Bit j set: token tok0 + j lies in a page outside [0, num_pages). Warp-collective: every lane
  // of the warp calls it, and every lane gets the whole block's bits.
  __device__ __forceinline__ uint64_t bad_tokens(int32_t num_pages) const {
#ifdef MLAKIT_NO_PAGE_CHECKS
    return 0;
#endif
    uint64_t bits = 0;
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const uint32_t vote = __ballot_sync(0xffffffffu, valid_page(id[k], num_pages) < 0);
      bits |= uint64_t{vote} << (32 * k);
    }
    return bits;
  }
};

// Whether token tok0 + j of a block is in a bad page (bits from BlockPages::bad_tokens).
__device__ __forceinline__ bool bad_token(uint64_t bits, int32_t j) { return (bits >> j) & 1; }

}  // namespace mlakit::plan
