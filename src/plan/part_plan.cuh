// Persistent schedule (plan.h), planned inside the decode kernel: one warp of each CTA computes
// its own part's range of (request, block) work and the partial slots of the two requests it may
// share with other parts, from seq_lens alone; one CTA also writes every request's RequestMeta
// for the combine kernel (which runs after the decode grid completes). Same arithmetic as the
// plan kernel (plan.cu), in 32 bits (the caller checks at Decoder creation that the line fits),
// so the partition and the slots are identical.
//
// Why: the separate plan kernel sat on the critical path of every call (about 3.4 us at h_q 16,
// b 64: its launch, its pass over seq_lens, then the decode kernel's reads of what it wrote).
// Here a CTA pays one warp's pass over seq_lens (one load per lane per 32 requests, from L2) and
// a few warp scans; pass 2 stops at the round holding the part's end. The one-shot attempt that
// was slower (docs/sm80-decode.md, log item 13) priced up to 67 candidate chunk lengths in every
// CTA with block-wide barriers; nothing of that here.
#pragma once

#include "kernels/common/ptx.h"
#include "plan/decode_params.h"
#include "plan/inputs.cuh"
#include "plan/plan.h"

namespace mlakit::plan {

// For requests of equal cost c and an even cut of `ideal` blocks per part: the part length at
// most ideal + ideal / 16 that puts every boundary between requests (a multiple of c), or cuts
// each request into k equal parts (c / k for a divisor k <= 8 of c; past 8 parts per request
// one partial more or less no longer counts), else `ideal`. I: int64_t in the plan kernel, int32_t
// in the decode kernel (same values when they fit).
template <typename I>
__host__ __device__ inline I aligned_part(I c, I ideal) {
  const I limit = ideal + ideal / 16;
  if (ideal >= c) {
    const I whole = c * ceil_div(ideal, c);
    return whole <= limit ? whole : ideal;
  }
  for (I k = c / ideal < I{8} ? c / ideal : I{8}; k >= 1 && c / k <= limit; --k) {
    if (c % k == 0) return c / k;
  }
  return ideal;
}

// The persistent plan's part length for a line of `line` blocks (each non-empty request's blocks
// plus `fixed`), its smallest non-empty and largest request cost, and the line and fixed cost to
// lay out with it: equal requests get aligned parts (aligned_part); when those cut each request,
// every part pays the fixed cost alike, so the fixed cost leaves the line and the blocks alone are
// cut equally (plan.h). Shared by the plan kernel (int64_t) and the in-kernel plan (int32_t).
template <typename I>
struct PartLength {
  I per_part, line, fixed;
};
template <typename I>
__host__ __device__ inline PartLength<I> part_length(I line, I min_cost, I max_cost, I fixed,
                                                     I num_parts, I min_chunk_blocks) {
  const I min_part = min_chunk_blocks > 1 ? min_chunk_blocks : I{1};
  const auto even = [&](I l) {
    const I part = ceil_div(l, num_parts);
    return part > min_part ? part : min_part;
  };
  I per_part = even(line);
  if (min_cost == max_cost) {
    per_part = aligned_part(max_cost, per_part);
    if (per_part < max_cost && fixed > 0) {
      line = line / max_cost * (max_cost - fixed);
      per_part = aligned_part(max_cost - fixed, even(line));
      fixed = 0;
    }
  }
  return {per_part, line, fixed};
}

// The (clamped) lengths of the batch's first kHeldRequests requests, lane l holding requests
// l, l + 32, ...: loaded at once, one round trip where a load per round of 32 would wait for the
// last. kBeforeWait: for a speculative plan made before griddepcontrol.wait, while the previous
// kernel may still write seq_lens: relaxed loads at GPU scope (ld.relaxed.gpu), which are not a
// data race with those writes and go to L2, so that no line stays in L1 that a read after the
// wait could find stale.
inline constexpr int32_t kHeldRequests = 128;
struct HeldLens {
  int32_t len[kHeldRequests / 32];
};
template <bool kBeforeWait>
__device__ __forceinline__ HeldLens load_held_lens(const PlanInputs& in) {
  const int32_t lane = static_cast<int32_t>(threadIdx.x % 32);
  HeldLens h;
#pragma unroll
  for (int32_t k = 0; k < kHeldRequests / 32; ++k) {
    const int32_t i = k * 32 + lane;
    const int32_t raw =
        i < in.batch
            ? (kBeforeWait ? ptx::ld_relaxed_gpu_global_b32(in.seq_lens + i) : in.seq_lens[i])
            : 0;
    h.len[k] = clamp_len(raw, in.max_len);
  }
  return h;
}
// Whether every lane holds the same lengths in a and b.
__device__ __forceinline__ bool same_lens(const HeldLens& a, const HeldLens& b) {
  bool same = true;
#pragma unroll
  for (int32_t k = 0; k < kHeldRequests / 32; ++k) same = same && a.len[k] == b.len[k];
  return __all_sync(0xffffffffu, same);
}

// Part `part` of the persistent plan. Called by all 32 lanes of one warp (all get the result);
// `requests` non-null: also writes RequestMeta [batch] (then the whole batch is scanned). `held`
// non-null: the first lengths (load_held_lens), those past kHeldRequests read from in.seq_lens;
// null: all read from in.seq_lens (the kRoles loop spills when it holds them).
__device__ inline PartPlan plan_part_in_warp(const PlanInputs& in, int32_t part,
                                             RequestMeta* requests, const HeldLens* held) {
  constexpr unsigned kAll = 0xffffffffu;
  const int32_t lane = static_cast<int32_t>(threadIdx.x % 32);
  int32_t fixed = in.fixed_cost_blocks;  // 0 for equal requests cut into parts (below)
  const auto cost_of = [&](int32_t blocks) { return blocks > 0 ? blocks + fixed : 0; };
  static_assert(kHeldRequests == 128);
  const auto len_of = [&](int32_t base) {
    const int32_t k = held == nullptr ? kHeldRequests / 32 : base / 32;
    return k == 0   ? held->len[0]
           : k == 1 ? held->len[1]
           : k == 2 ? held->len[2]
           : k == 3 ? held->len[3]
                    : clamped_len(in, base + lane);
  };

  // Pass 1: the line's length, the smallest non-empty and the largest request cost.
  int32_t line = 0, min_cost = INT32_MAX, max_cost = 0;
  for (int32_t base = 0; base < in.batch; base += 32) {
    const int32_t cost = cost_of(ceil_div(len_of(base), in.block_n));
    line += __reduce_add_sync(kAll, cost);
    min_cost = min(min_cost, __reduce_min_sync(kAll, cost > 0 ? cost : INT32_MAX));
    max_cost = max(max_cost, __reduce_max_sync(kAll, cost));
  }
  const PartLength<int32_t> length =
      part_length(line, min_cost, max_cost, fixed, in.num_parts, in.min_chunk_blocks);
  const int32_t per_part = length.per_part;
  line = length.line;
  fixed = length.fixed;

  // Pass 2: line positions and partial slots by warp scans, 32 requests a round; the part's
  // boundaries x (begin, end) lie in the first request whose line end is past x.
  const int32_t x_begin = part * per_part, x_end = x_begin + per_part;
  PartPlan pp{.begin_request = in.batch,
              .begin_block = 0,
              .end_request = in.batch,
              .end_block = 0,
              .begin_slot = -1,
              .end_slot = -1};
  bool have_begin = false, have_end = false;
  int32_t line_before = 0, slots_before = 0;
  for (int32_t base = 0; base < in.batch; base += 32) {
    const int32_t i = base + lane;
    const int32_t len = len_of(base);
    const int32_t blocks = ceil_div(len, in.block_n);
    int32_t end = cost_of(blocks);
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int32_t v = __shfl_up_sync(kAll, end, d);
      if (lane >= d) end += v;
    }
    const int32_t round_line = __shfl_sync(kAll, end, 31);
    end += line_before;
    const int32_t first_block_pos = end - blocks;
    int32_t first = 0, splits = 0;
    if (blocks > 0) {
      first = first_block_pos / per_part;
      splits = (first_block_pos + blocks - 1) / per_part - first + 1;
    }
    const int32_t own_slots = splits > 1 ? splits : 0;
    int32_t slots_to = own_slots;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int32_t v = __shfl_up_sync(kAll, slots_to, d);
      if (lane >= d) slots_to += v;
    }
    const int32_t round_slots = __shfl_sync(kAll, slots_to, 31);
    const int32_t split_offset = slots_before + slots_to - own_slots;
    if (requests != nullptr && i < in.batch) {
      requests[i] = {
          .seq_len = len, .num_splits = splits, .first = first, .split_offset = split_offset};
    }
    const int32_t slot = splits > 1 ? split_offset + (part - first) : -1;
    if (!have_begin) {
      const unsigned hit = __ballot_sync(kAll, end > x_begin);
      if (hit != 0) {
        const int j = __ffs(hit) - 1;
        pp.begin_request = base + j;
        pp.begin_block = max(0, x_begin - __shfl_sync(kAll, first_block_pos, j));
        pp.begin_slot = __shfl_sync(kAll, slot, j);
        have_begin = true;
      }
    }
    if (!have_end) {
      const unsigned hit = __ballot_sync(kAll, end > x_end);
      if (hit != 0) {
        const int j = __ffs(hit) - 1;
        pp.end_request = base + j;
        pp.end_block = max(0, x_end - __shfl_sync(kAll, first_block_pos, j));
        pp.end_slot = __shfl_sync(kAll, slot, j);
        have_end = true;
      }
    }
    if (have_end && requests == nullptr) break;
    line_before += round_line;
    slots_before += round_slots;
  }
  return pp;
}

// The same from the metadata the plan kernel wrote (batches planned by the plan kernel).
__device__ __forceinline__ PartPlan part_plan_from_meta(const PlanView& view, int32_t part,
                                                        int32_t batch) {
  const PartMeta pm = view.parts[part];
  PartPlan pp{.begin_request = pm.begin_request,
              .begin_block = pm.begin_block,
              .end_request = pm.end_request,
              .end_block = pm.end_block,
              .begin_slot = -1,
              .end_slot = -1};
  const auto slot_of = [&](int32_t r) {
    if (r >= batch) return -1;
    const RequestMeta rm = view.requests[r];
    return rm.num_splits > 1 ? rm.split_offset + (part - rm.first) : -1;
  };
  pp.begin_slot = slot_of(pm.begin_request);
  pp.end_slot = slot_of(pm.end_request);
  return pp;
}

// The inputs of the persistent plan, from the decode kernel's parameters.
__device__ __forceinline__ PlanInputs plan_inputs(const DecodeParamsBase& p) {
  return PlanInputs{.seq_lens = p.seq_lens,
                    .batch = p.batch,
                    .max_len = p.max_len,
                    .block_n = p.plan.block_n,
                    .fixed_cost_blocks = p.fixed_cost_blocks,
                    .min_chunk_blocks = p.min_chunk_blocks,
                    .num_parts = p.plan.num_parts,
                    .max_splits = p.plan.max_splits};
}

// The persistent part of CTA `cta` for a decode kernel (its params derive from DecodeParamsBase):
// planned by the calling warp from seq_lens when p.inline_plan (the grid's
// first CTA also writes every request's metadata for the combine kernel), else read from the plan
// kernel's metadata. Call from one whole warp, after griddepcontrol.wait.
__device__ __forceinline__ PartPlan part_for_cta(const DecodeParamsBase& p, int32_t cta) {
  if (!p.inline_plan) return part_plan_from_meta(p.plan, cta, p.batch);
  const PlanInputs in = plan_inputs(p);
  return plan_part_in_warp(in, cta, blockIdx.x == 0 ? p.plan.requests : nullptr, nullptr);
}

// The persistent part planned before griddepcontrol.wait, from seq_lens as they are then, and
// confirmed after it. A CTA that reaches its SM while the previous kernel still runs spends that
// time on the plan; after the wait only one load of the lengths and a comparison remain (H100,
// sm80, h_q 16, b 64, L 4096: the plan after the wait took 2.4 us, the confirmation 0.3). Only for
// inline plans of at most kHeldRequests requests (all lengths in registers).
struct SpeculativePart {
  HeldLens lens;  // as read before the wait
  PartPlan part;  // planned from them
};
__device__ __forceinline__ bool can_speculate(const DecodeParamsBase& p) {
  return p.schedule == Schedule::kPersistent && p.inline_plan && p.batch <= kHeldRequests;
}
// Before griddepcontrol.wait, one whole warp: the lengths by relaxed GPU-scope loads (they may
// still change until the wait; load_held_lens).
__device__ __forceinline__ SpeculativePart speculate_part(const DecodeParamsBase& p, int32_t cta) {
  const PlanInputs in = plan_inputs(p);
  SpeculativePart spec;
  spec.lens = load_held_lens<true>(in);
  spec.part = plan_part_in_warp(in, cta, nullptr, &spec.lens);
  return spec;
}
// After griddepcontrol.wait, the same warp: the speculative part when the lengths did not change
// (the plan is a function of them and of the plan shape), else planned again. Not for the grid's
// first CTA: it writes every request's RequestMeta for the combine kernel, which may read the
// previous call's until this grid's wait (part_for_cta after the wait).
__device__ __forceinline__ PartPlan confirm_part(const DecodeParamsBase& p, int32_t cta,
                                                 const SpeculativePart& spec) {
  const PlanInputs in = plan_inputs(p);
  const HeldLens lens = load_held_lens<false>(in);
  if (same_lens(lens, spec.lens)) return spec.part;
  return plan_part_in_warp(in, cta, nullptr, &lens);
}

}  // namespace mlakit::plan
