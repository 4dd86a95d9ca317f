// Corrupted block tables (issue 34): out-of-range page ids planted in used slots, and the inputs
// whose cpu reference is what a GPU backend must then give. A backend reads nothing of such a
// page and masks its tokens (plan/page_mask.cuh), so the result is the request's without those
// tokens; attention is order-free (RoPE is in the cached keys), so that is the cpu reference of
// the request with those pages taken out of its row and its length shortened to match.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "harness/workload.h"
#include "mlakit/mlakit.h"

namespace mlakit::harness {

struct BadSlot {
  int32_t request = 0;
  int32_t slot = 0;  // block-table column
  int32_t id = 0;    // what was written there
};

// Writes `count` out-of-range ids (cycling through num_pages, INT32_MAX, -5 and INT32_MIN) into
// used slots of a dense problem's block table, at most one per page, in pages that lie wholly
// before every query token's causal bound (so that taking them out changes no bound). The slots
// are spread over the requests that have such pages, from a seeded choice; the result lists
// them in block-table order. kInvalidArgument when the problem is sparse or context parallel (its
// lengths are global, its table local) or fewer than `count` such pages exist.
Status plant_bad_pages(HostInputs* in, int count, uint64_t seed, std::vector<BadSlot>* planted);
// How many pages plant_bad_pages could corrupt in `in` (0 for a sparse or context-parallel one).
int64_t bad_page_room(const HostInputs& in);

// `in` with the planted slots taken out: each row loses those columns (the rest shift left, the
// freed tail slots hold an out-of-range id) and each length page_size tokens per slot. Its cpu
// reference is the expected result of `in` on a GPU backend.
HostInputs without_slots(const HostInputs& in, std::span<const BadSlot> planted);

}  // namespace mlakit::harness
