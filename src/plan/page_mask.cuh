// Tokens in pages the block table does not name (issue 34). An entry outside [0, num_pages) in a
// used slot is never read (valid_page: the copies read nothing and fill zeros) and its tokens are
// masked out of the softmax, so the request's result is the one it would have without those tokens:
// a corrupted entry contributes nothing, whatever it holds. Decoder::check_data reports it.
//
// Whoever reads a block's entries for its copy publishes the block's bits (bit j: token j is in a
// bad page) in shared memory with the block, and the consumers read one word a block and mask only
// when it is non-zero. sm90: the producer warp (SmallStorage::bad_tokens, before the stage's first
// barrier). sm80 (SharedStorage::bad_tokens): the copying threads in the plain loop, score warp 0
// in kRoles. Loading and voting on the entries in the consumers cost 2-4% on sm90's wide tile and
// up to 8% on sm80's 64-row tile; scanning each chunk's entries once and voting per block only in
// a chunk with a bad entry cost sm80 3.2% (H200, bench/results/2026-11-27-h200-page-mask).
#pragma once

#include <cstdint>

#include "plan/decode_params.h"

namespace mlakit::plan {

// MLAKIT_NO_PAGE_CHECKS (decode_params.h) removes the bits too; sm80 tests this constant.
// MLAKIT_NO_PAGE_MASK removes only sm80's bits and mask (ids still checked before a read): with
// it an A/B splits sm80's cost between the reads' checks and the mask. Never for use.
#if defined(MLAKIT_NO_PAGE_CHECKS) || defined(MLAKIT_NO_PAGE_MASK)
inline constexpr bool kPageChecks = false;
#else
inline constexpr bool kPageChecks = true;
#endif

// Whether token tok0 + j of a block is in a bad page (bits: a block's published word).
__device__ __forceinline__ bool bad_token(uint64_t bits, int32_t j) { return (bits >> j) & 1; }

}  // namespace mlakit::plan
