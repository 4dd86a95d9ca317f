// Device side of the plan: the chunks of work one CTA handles (plan.h): one-shot, read from the
// metadata that the plan kernel wrote; persistent, from the CTA's PartPlan (part_plan.cuh) in
// shared memory; cluster, from seq_lens directly. Call only after pdl::griddepcontrol_wait().
#pragma once

#include "plan/decode_params.h"
#include "plan/part_plan.cuh"
#include "plan/plan.h"

namespace mlakit::plan {

// A contiguous range of one request's tokens.
struct Chunk {
  int32_t request;
  int32_t seq_len;      // the request's (clamped) length
  int32_t token_begin;  // multiple of block_n
  int32_t token_end;    // <= seq_len
  // Partial slot; -1 when the chunk is the whole request (written directly); kSlotCluster when
  // the cluster's CTAs merge it.
  int32_t slot;
};

// Chunk::slot of the cluster schedule: the cluster's CTAs merge their results (plan.h).
inline constexpr int32_t kSlotCluster = -2;

// The cluster schedule's one chunk of CTA `cta` (chunk cta % S of request cta / S), whose request
// is seq_len tokens long.
__device__ __forceinline__ Chunk cluster_chunk(const PlanView& view, int32_t cta, int32_t seq_len) {
  const int32_t splits = view.max_splits, size = view.cluster_size;
  const int32_t request = cta / splits, split = cta % splits;
  const int32_t blocks = ceil_div(seq_len, view.block_n);
  const int32_t per = ceil_div(blocks, splits);
  const int32_t begin = min(split * per, blocks);
  const int32_t end = min(begin + per, blocks);
  Chunk chunk{.request = request,
              .seq_len = seq_len,
              .token_begin = begin * view.block_n,
              .token_end = min(end * view.block_n, seq_len),
              .slot = size > 1     ? kSlotCluster
                      : splits > 1 ? request * splits + split
                                   : -1};
  if (chunk.token_end < chunk.token_begin) chunk.token_end = chunk.token_begin;
  return chunk;
}

// The chunks of CTA `cta` (its index among the CTAs of one query tile) in order, under any
// schedule: persistent, the non-empty chunks of part `cta`; one-shot, chunk cta / batch of
// request cta % batch (split-major: the CTAs of the first chunks, which always have work, are
// scheduled first), if the request has that many; cluster, chunk cta % S of request cta / S,
// always (empty when the request is too short; its cluster still merges it). All threads of the
// CTA see the same chunks.
// One loop serves every schedule, so a kernel inlines its chunk code once.
class ChunkIterator {
 public:
  // part: persistent, this CTA's part (shared memory); seq_lens and max_len: the inputs.
  __device__ __forceinline__ ChunkIterator(const PlanView& view, Schedule schedule, int32_t cta,
                                           int32_t batch, const PartPlan* part,
                                           const int32_t* seq_lens, int32_t max_len)
      : view_(view),
        part_(part),
        seq_lens_(seq_lens),
        cta_(cta),
        batch_(batch),
        max_len_(max_len),
        schedule_(schedule),
        request_(schedule == Schedule::kPersistent ? part->begin_request : 0) {}

  // Problem::var_q, one-shot and cluster schedules: from now on, the chunk of a request for
  // which this CTA's query tile (the kernels' rows from row0 on) holds no live row
  // (RowView::live_rows <= row0: the tile lies wholly past the request's query length) is not
  // handed out. Every role of a CTA calls it alike, so producers and consumers skip the same
  // chunks; the chunk loop loads, computes and writes nothing for such a tile, and the CTA ends
  // at once, freeing its SM for the grid's next CTA (the combine skips the rows too; a cluster
  // merge after the loop still runs: docs/sm90-decode.md). No-op without var_q
  // (view.cu_seqlens_q null) and for a sparse problem run as (request, token) pairs
  // (RowView::request_tokens > 1, s_q > 1): there the compaction leaves a token past q_len no
  // index. (A sparse problem with s_q 1 takes the skip like a dense one.)
  // The persistent schedule hands out every chunk: its CTAs each take a fixed share of one
  // tile's blocks, so a skipped chunk would only leave its SM idle (and there a data-dependent
  // skip in the part's loop made ptxas serialize the wide tile's wgmmas, C7520; so would a
  // division here). Copies what it needs: a pointer into the kernel's parameters would make the
  // compiler copy them to local memory.
  __device__ __forceinline__ void skip_dead_tiles(const RowView& view, int32_t row0) {
    if (view.request_tokens > 1) return;
    cu_seqlens_q_ = view.cu_seqlens_q;
    h_q_ = view.h_q;
    row0_ = row0;
  }

  // The next chunk into *chunk; false when there is none.
  __device__ __forceinline__ bool next(Chunk* chunk) {
    if (schedule_ == Schedule::kCluster) {
      if (request_++ > 0) return false;
      const int32_t request = cta_ / view_.max_splits;
      *chunk = cluster_chunk(view_, cta_, clamped_len(seq_lens_, request, batch_, max_len_));
      return live(request);
    }
    if (schedule_ == Schedule::kOneShot) {
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
      return live(request);
    }
    for (;; ++request_) {
      // Re-read each time (shared memory, and seq_lens from L1): nothing of the part stays in
      // registers across chunks, where the main kernel needs them all. Only the part's first and
      // last request can be split; every request in between is written directly.
      const PartPlan pp = *part_;
      const int32_t r = request_;
      if (r > min(pp.end_request, batch_ - 1)) return false;
      const int32_t seq_len = clamped_len(seq_lens_, r, batch_, max_len_);
      const int32_t blocks = ceil_div(seq_len, view_.block_n);
      const int32_t begin = r == pp.begin_request ? pp.begin_block : 0;
      const int32_t end = r == pp.end_request ? pp.end_block : blocks;
      if (begin >= end) continue;
      ++request_;
      *chunk = Chunk{.request = r,
                     .seq_len = seq_len,
                     .token_begin = begin * view_.block_n,
                     .token_end = min(end * view_.block_n, seq_len),
                     .slot = r == pp.begin_request ? pp.begin_slot
                             : r == pp.end_request ? pp.end_slot
                                                   : -1};
      return true;
    }
  }

 private:
  // skip_dead_tiles: whether request `request` holds a live row of this CTA's tile (rows are
  // token-major: RowView::live_rows = q_len h_q).
  __device__ __forceinline__ bool live(int32_t request) const {
    if (cu_seqlens_q_ == nullptr) return true;
    return (int64_t{cu_seqlens_q_[request + 1]} - cu_seqlens_q_[request]) * h_q_ > row0_;
  }

  const PlanView& view_;
  const PartPlan* part_;
  const int32_t* seq_lens_;
  int32_t cta_;
  int32_t batch_;
  int32_t max_len_;
  Schedule schedule_;
  // Persistent: the next request to look at; one-shot, cluster: the chunks handed out.
  int32_t request_;
  // skip_dead_tiles: RowView::cu_seqlens_q (null: nothing skipped), h_q, the tile's first row.
  const int32_t* cu_seqlens_q_ = nullptr;
  int32_t h_q_ = 0, row0_ = 0;
};

}  // namespace mlakit::plan
