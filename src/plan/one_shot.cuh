// One-shot planning, block-cooperative (plan.h): the batch's chunk length and each request's
// split, for the one-shot plan kernel.
//
// The chunk length L: candidate s prices L = ceil(max_blocks / s) (s chunks for the longest
// request) as waves x (L + fixed cost), waves = ceil(chunks / num_parts); the cheapest wins
// (ties: the longer L, fewer partials). Counting waves matters: at batch 64 and h_q 128 (66
// slots, 128 blocks per request) the rule L >= total / slots (here 125) split every request in
// two, 128 chunks in two waves of 64 blocks, where one wave of 64 whole requests takes as long
// and needs no combine (the combine of such partials took 17 us, H200, 2026-11). Candidates whose
// partials could overflow the workspace (more than 2 x num_parts slots) are skipped; that rule's L
// always fits and is priced as one more candidate. The (candidate, request) pairs are spread over
// the threads, counted with shared atomics (integers: the result does not depend on their order).
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cuda/functional>

#include "plan/inputs.cuh"
#include "plan/plan.h"

namespace mlakit::plan {

// Splits of a request of `blocks` blocks for chunk length `chunk`, evened out (chunks of
// ceil(blocks / splits) blocks): 0 for an empty request.
struct OneShotSplit {
  int32_t splits;
  int32_t per_chunk;
};
__host__ __device__ inline OneShotSplit one_shot_split(int32_t blocks, int64_t chunk) {
  const int32_t splits = static_cast<int32_t>(ceil_div<int64_t>(blocks, chunk));
  const int32_t per_chunk = splits > 0 ? ceil_div(blocks, splits) : 0;
  return {.splits = per_chunk > 0 ? ceil_div(blocks, per_chunk) : 0, .per_chunk = per_chunk};
}

inline constexpr int kMaxOneShotCandidates = 512;

template <int kThreads>
class OneShotPlanner {
  using Reduce = cub::BlockReduce<int64_t, kThreads>;
  using MinReduce = cub::BlockReduce<uint64_t, kThreads>;

 public:
  struct TempStorage {
    union {
      typename Reduce::TempStorage reduce;
      typename MinReduce::TempStorage min_reduce;
    } cub;
    int32_t chunks[kMaxOneShotCandidates + 1];
    int32_t slots[kMaxOneShotCandidates + 1];
    int64_t broadcast[2];
  };

  // The chunk length in blocks (at least 1). Called by all threads; all get the same value.
  __device__ static int64_t chunk_blocks(const PlanInputs& in, TempStorage& tmp) {
    const int tid = static_cast<int>(threadIdx.x);
    int64_t total_blocks = 0, max_blocks = 0;
    for (int32_t base = 0; base < in.batch; base += kThreads) {
      const int64_t blocks = request_blocks(in, base + tid);
      const int64_t sum = Reduce(tmp.cub.reduce).Sum(blocks);
      __syncthreads();
      const int64_t largest = Reduce(tmp.cub.reduce).Reduce(blocks, cuda::maximum<>{});
      __syncthreads();
      total_blocks += sum;  // valid in thread 0
      max_blocks = max(max_blocks, largest);
    }
    const int32_t candidates = min(in.max_splits, kMaxOneShotCandidates);
    for (int32_t c = tid; c <= candidates; c += kThreads) {
      tmp.chunks[c] = 0;
      tmp.slots[c] = 0;
    }
    if (tid == 0) {
      tmp.broadcast[0] = total_blocks;
      tmp.broadcast[1] = max(max_blocks, int64_t{1});
    }
    __syncthreads();
    total_blocks = tmp.broadcast[0];
    max_blocks = tmp.broadcast[1];

    // Candidate c < candidates: s = c + 1; candidate `candidates`: the rule L >= total / slots.
    // 32-bit arithmetic in the pair loop: 64-bit divisions are subroutines of ~100 instructions.
    const int32_t min_chunk = max(in.min_chunk_blocks, 1);
    const int32_t max_b = static_cast<int32_t>(max_blocks);
    const int32_t fallback = static_cast<int32_t>(
        max(max(int64_t{min_chunk}, ceil_div<int64_t>(total_blocks, in.num_parts)),
            ceil_div<int64_t>(max_blocks, in.max_splits)));
    const auto chunk_of = [&](int32_t c) -> int32_t {
      return c < candidates ? max(min_chunk, ceil_div(max_b, c + 1)) : fallback;
    };
    for (int32_t pair = tid; pair < (candidates + 1) * in.batch; pair += kThreads) {
      const int32_t c = pair / in.batch;
      const int32_t n = ceil_div(request_blocks(in, pair - c * in.batch), chunk_of(c));
      if (n > 0) atomicAdd(&tmp.chunks[c], n);
      if (n > 1) atomicAdd(&tmp.slots[c], n);
    }
    __syncthreads();
    uint64_t best = ~uint64_t{0};  // cost << 32 | ~L: the smallest wins
    for (int32_t c = tid; c <= candidates; c += kThreads) {
      if (c < candidates && tmp.slots[c] > 2 * in.num_parts) continue;
      const int32_t chunk = chunk_of(c);
      const int64_t cost =
          int64_t{ceil_div(tmp.chunks[c], in.num_parts)} * (chunk + in.fixed_cost_blocks);
      best = min(best, (static_cast<uint64_t>(cost) << 32) | ~static_cast<uint32_t>(chunk));
    }
    __syncthreads();  // the counts are read; cub's storage overlaps nothing else
    best = MinReduce(tmp.cub.min_reduce).Reduce(best, cuda::minimum<>{});
    if (tid == 0) tmp.broadcast[0] = static_cast<int64_t>(~static_cast<uint32_t>(best));
    __syncthreads();
    const int64_t chunk = tmp.broadcast[0];
    __syncthreads();  // tmp may be reused on return
    return chunk;
  }
};

}  // namespace mlakit::plan
