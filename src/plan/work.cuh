// Device side of the plan: the chunks of work one CTA handles, read from the metadata that the
// plan kernel wrote (plan.h). Call only after pdl::griddepcontrol_wait().
#pragma once

#include "plan/plan.h"

namespace mlakit::plan {

// A contiguous range of one request's tokens.
struct Chunk {
  int32_t request;
  int32_t seq_len;      // the request's (clamped) length
  int32_t token_begin;  // multiple of block_n
  int32_t token_end;    // <= seq_len
  int32_t slot;         // partial slot; -1 when the chunk is the whole request
};

// Persistent schedule: calls f(chunk) for each non-empty chunk of part `part`, in order. All
// threads of the CTA see the same chunks.
template <typename F>
__device__ __forceinline__ void for_each_chunk_of_part(const PlanView& view, int32_t part,
                                                       int32_t batch, F&& f) {
  for (int32_t r = view.parts[part].begin_request;; ++r) {
    // Re-read each time (an L1 hit): nothing of the part stays in registers across chunks, where
    // the main kernel needs them all.
    const PartMeta pm = view.parts[part];
    if (r > min(pm.end_request, batch - 1)) break;
    const RequestMeta rm = view.requests[r];
    const int32_t blocks = ceil_div(rm.seq_len, view.block_n);
    const int32_t begin = r == pm.begin_request ? pm.begin_block : 0;
    const int32_t end = r == pm.end_request ? pm.end_block : blocks;
    if (begin >= end) continue;
    f(Chunk{.request = r,
            .seq_len = rm.seq_len,
            .token_begin = begin * view.block_n,
            .token_end = min(end * view.block_n, rm.seq_len),
            .slot = rm.num_splits > 1 ? rm.split_offset + (part - rm.first) : -1});
  }
}

// One-shot schedule: chunk `split` of request `request`; false when the request has fewer chunks.
__device__ __forceinline__ bool one_shot_chunk(const PlanView& view, int32_t split, int32_t request,
                                               Chunk* chunk) {
  const RequestMeta rm = view.requests[request];
  if (split >= rm.num_splits) return false;
  const int32_t begin = split * rm.first * view.block_n;
  *chunk = Chunk{.request = request,
                 .seq_len = rm.seq_len,
                 .token_begin = begin,
                 .token_end = min(begin + rm.first * view.block_n, rm.seq_len),
                 .slot = rm.num_splits > 1 ? rm.split_offset + split : -1};
  return true;
}

}  // namespace mlakit::plan
