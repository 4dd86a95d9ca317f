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

// The chunks of CTA `cta` (its index among the CTAs of one query tile) in order, under either
// schedule: persistent, the non-empty chunks of part `cta`; one-shot, chunk cta / batch of
// request cta % batch (split-major: the CTAs of the first chunks, which always have work, are
// scheduled first), if the request has that many. All threads of the CTA see the same chunks.
// One loop serves both schedules, so a kernel inlines its chunk code once.
class ChunkIterator {
 public:
  __device__ __forceinline__ ChunkIterator(const PlanView& view, Schedule schedule, int32_t cta,
                                           int32_t batch)
      : view_(view),
        cta_(cta),
        batch_(batch),
        one_shot_(schedule == Schedule::kOneShot),
        request_(one_shot_ ? 0 : view.parts[cta].begin_request) {}

  // The next chunk into *chunk; false when there is none.
  __device__ __forceinline__ bool next(Chunk* chunk) {
    if (one_shot_) {
      if (request_++ > 0) return false;
      const int32_t split = cta_ / batch_, request = cta_ % batch_;
      const RequestMeta rm = view_.requests[request];
      if (split >= rm.num_splits) return false;
      const int32_t begin = split * rm.first * view_.block_n;
      *chunk = Chunk{.request = request,
                     .seq_len = rm.seq_len,
                     .token_begin = begin,
                     .token_end = min(begin + rm.first * view_.block_n, rm.seq_len),
                     .slot = rm.num_splits > 1 ? rm.split_offset + split : -1};
      return true;
    }
    for (;; ++request_) {
      // Re-read each time (an L1 hit): nothing of the part stays in registers across chunks,
      // where the main kernel needs them all.
      const PartMeta pm = view_.parts[cta_];
      const int32_t r = request_;
      if (r > min(pm.end_request, batch_ - 1)) return false;
      const RequestMeta rm = view_.requests[r];
      const int32_t blocks = ceil_div(rm.seq_len, view_.block_n);
      const int32_t begin = r == pm.begin_request ? pm.begin_block : 0;
      const int32_t end = r == pm.end_request ? pm.end_block : blocks;
      if (begin >= end) continue;
      ++request_;
      *chunk = Chunk{.request = r,
                     .seq_len = rm.seq_len,
                     .token_begin = begin * view_.block_n,
                     .token_end = min(end * view_.block_n, rm.seq_len),
                     .slot = rm.num_splits > 1 ? rm.split_offset + (cta_ - rm.first) : -1};
      return true;
    }
  }

 private:
  const PlanView& view_;
  int32_t cta_;
  int32_t batch_;
  bool one_shot_;
  int32_t request_;  // persistent: the next request to look at; one-shot: chunks handed out
};

}  // namespace mlakit::plan
