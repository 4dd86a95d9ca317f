// The plan kernels (one CTA each) and the workspace layout; see plan.h for the schedules.
//
// Persistent: three passes over the batch, each a block-wide scan: (1) the line position where
// each request ends, (2) each request's first part, number of splits and first partial slot,
// (3) per part, a binary search for its first and last block. O(batch / threads + log batch)
// steps, so the plan stays a few microseconds at any batch size.
#include <algorithm>
#include <cub/block/block_scan.cuh>

#include "core/cuda_check.h"
#include "kernels/common/pdl.h"
#include "plan/plan.h"

namespace mlakit::plan {
namespace {

constexpr int kPlanThreads = 512;
constexpr size_t kAlign = 256;

size_t align_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

struct PlanKernelParams {
  const int32_t* seq_lens;  // [batch]
  int32_t batch;
  int32_t max_len;  // lengths are clamped to [0, max_len]
  int32_t fixed_cost_blocks;
  int32_t min_chunk_blocks;
  PlanView view;
};

__device__ __forceinline__ int32_t load_len(const PlanKernelParams& p, int32_t i) {
  return i < p.batch ? min(max(p.seq_lens[i], 0), p.max_len) : 0;
}

// Smallest request whose last block lies at or after line position x, and the first of its
// blocks at or after x; (batch, 0) when x is past the end of the line.
__device__ PartMeta find_block(const PlanKernelParams& p, int64_t x, int64_t line) {
  if (x >= line) return {p.batch, 0, p.batch, 0};
  int32_t lo = 0, hi = p.batch - 1;  // line_end[hi] > x
  while (lo < hi) {
    const int32_t mid = (lo + hi) / 2;
    if (p.view.line_end[mid] > x) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  const int64_t blocks = ceil_div(p.view.requests[lo].seq_len, p.view.block_n);
  const int64_t first_block_pos = p.view.line_end[lo] - blocks;
  const int32_t block = static_cast<int32_t>(max(int64_t{0}, x - first_block_pos));
  return {lo, block, lo, block};
}

__global__ void __launch_bounds__(kPlanThreads) plan_persistent(const PlanKernelParams p) {
  using Scan = cub::BlockScan<int64_t, kPlanThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  const int32_t block_n = p.view.block_n;

  // seq_lens may be written by the previous kernel, and the previous call's kernels read the
  // metadata rewritten here.
  pdl::griddepcontrol_wait();
  pdl::griddepcontrol_launch_dependents();

  // Pass 1: where each request ends on the line (its overhead, then its blocks).
  int64_t line = 0;
  for (int32_t base = 0; base < p.batch; base += kPlanThreads) {
    const int32_t i = base + static_cast<int32_t>(threadIdx.x);
    const int32_t blocks = ceil_div(load_len(p, i), block_n);
    const int64_t cost = blocks > 0 ? blocks + p.fixed_cost_blocks : 0;
    int64_t end = 0, total = 0;
    Scan(scan_storage).InclusiveSum(cost, end, total);
    __syncthreads();
    if (i < p.batch) p.view.line_end[i] = line + end;
    line += total;
  }
  const int64_t per_part =
      max(ceil_div<int64_t>(line, p.view.num_parts), int64_t{max(p.min_chunk_blocks, 1)});

  // Pass 2: each request's parts and partial slots (only requests with several chunks use slots).
  int64_t slots_before = 0;
  for (int32_t base = 0; base < p.batch; base += kPlanThreads) {
    const int32_t i = base + static_cast<int32_t>(threadIdx.x);
    const int32_t len = load_len(p, i);
    const int32_t blocks = ceil_div(len, block_n);
    int32_t first = 0, splits = 0;
    if (blocks > 0) {
      const int64_t first_block_pos = p.view.line_end[i] - blocks;
      first = static_cast<int32_t>(first_block_pos / per_part);
      splits = static_cast<int32_t>((first_block_pos + blocks - 1) / per_part) - first + 1;
    }
    int64_t offset = 0, total = 0;
    Scan(scan_storage).ExclusiveSum(int64_t{splits > 1 ? splits : 0}, offset, total);
    __syncthreads();
    if (i < p.batch) {
      p.view.requests[i] = {.seq_len = len,
                            .num_splits = splits,
                            .first = first,
                            .split_offset = static_cast<int32_t>(slots_before + offset)};
    }
    slots_before += total;
  }
  __syncthreads();  // line_end and requests are read below by other threads

  // Pass 3: each part's first and one-past-last block.
  for (int32_t part = threadIdx.x; part < p.view.num_parts; part += kPlanThreads) {
    const PartMeta begin = find_block(p, part * per_part, line);
    const PartMeta end = find_block(p, (part + 1) * per_part, line);
    p.view.parts[part] = {.begin_request = begin.begin_request,
                          .begin_block = begin.begin_block,
                          .end_request = end.begin_request,
                          .end_block = end.begin_block};
  }
}

__global__ void __launch_bounds__(kPlanThreads) plan_one_shot(const PlanKernelParams p) {
  using Scan = cub::BlockScan<int64_t, kPlanThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ int32_t s_max_blocks;
  const int32_t block_n = p.view.block_n;

  pdl::griddepcontrol_wait();
  pdl::griddepcontrol_launch_dependents();

  // Pass 1: total and largest number of blocks.
  if (threadIdx.x == 0) s_max_blocks = 0;
  __syncthreads();
  int64_t total_blocks = 0;
  for (int32_t base = 0; base < p.batch; base += kPlanThreads) {
    const int32_t blocks = ceil_div(load_len(p, base + static_cast<int32_t>(threadIdx.x)), block_n);
    atomicMax(&s_max_blocks, blocks);
    int64_t prefix = 0, total = 0;
    Scan(scan_storage).ExclusiveSum(int64_t{blocks}, prefix, total);
    __syncthreads();
    total_blocks += total;
  }
  const int64_t max_blocks = s_max_blocks;
  // One chunk length for the batch: about num_parts chunks in all, at most max_splits per request.
  const int64_t chunk = max(
      max(int64_t{max(p.min_chunk_blocks, 1)}, ceil_div<int64_t>(total_blocks, p.view.num_parts)),
      ceil_div<int64_t>(max_blocks, p.view.max_splits));

  // Pass 2: per request, the splits (evened out: chunks of ceil(blocks / splits)) and slots.
  int64_t slots_before = 0;
  for (int32_t base = 0; base < p.batch; base += kPlanThreads) {
    const int32_t i = base + static_cast<int32_t>(threadIdx.x);
    const int32_t len = load_len(p, i);
    const int32_t blocks = ceil_div(len, block_n);
    int32_t splits = static_cast<int32_t>(ceil_div<int64_t>(blocks, chunk));
    const int32_t per_chunk = splits > 0 ? ceil_div(blocks, splits) : 0;
    splits = per_chunk > 0 ? ceil_div(blocks, per_chunk) : 0;
    int64_t offset = 0, total = 0;
    Scan(scan_storage).ExclusiveSum(int64_t{splits > 1 ? splits : 0}, offset, total);
    __syncthreads();
    if (i < p.batch) {
      p.view.requests[i] = {.seq_len = len,
                            .num_splits = splits,
                            .first = per_chunk,
                            .split_offset = static_cast<int32_t>(slots_before + offset)};
    }
    slots_before += total;
  }
}

}  // namespace

WorkspaceLayout workspace_layout(const PlanShape& s) {
  WorkspaceLayout w;
  const bool persistent = s.schedule == Schedule::kPersistent;
  const int64_t max_blocks = ceil_div<int64_t>(s.max_seq_len, s.block_n);
  if (max_blocks > 1) {
    const int64_t bound = persistent ? 2 * (int64_t{s.num_parts} - 1) : 2 * int64_t{s.num_parts};
    w.max_slots = std::min<int64_t>(bound, int64_t{s.max_batch} * max_blocks);
  }
  size_t at = 0;
  w.requests = at;
  at += align_up(sizeof(RequestMeta) * s.max_batch);
  w.parts = at;
  if (persistent) at += align_up(sizeof(PartMeta) * s.num_parts);
  w.line_end = at;
  if (persistent) at += align_up(sizeof(int64_t) * s.max_batch);
  w.partial_lse = at;
  at += align_up(sizeof(float) * w.max_slots * s.rows);
  w.partial_out = at;
  at += align_up(sizeof(float) * w.max_slots * s.rows * kDv);
  w.bytes = at;
  return w;
}

PlanView plan_view(const PlanShape& s, const WorkspaceLayout& w, void* workspace, int max_splits) {
  auto* base = static_cast<char*>(workspace);
  return {.requests = reinterpret_cast<RequestMeta*>(base + w.requests),
          .parts = reinterpret_cast<PartMeta*>(base + w.parts),
          .line_end = reinterpret_cast<int64_t*>(base + w.line_end),
          .partial_lse = reinterpret_cast<float*>(base + w.partial_lse),
          .partial_out = reinterpret_cast<float*>(base + w.partial_out),
          .block_n = s.block_n,
          .num_parts = s.num_parts,
          .max_splits = max_splits};
}

int32_t one_shot_max_splits(const PlanShape& s, int32_t batch) {
  const int64_t max_blocks = std::max<int64_t>(1, ceil_div<int64_t>(s.max_seq_len, s.block_n));
  const int64_t by_batch = ceil_div<int64_t>(2 * int64_t{s.num_parts}, std::max(batch, 1));
  return static_cast<int32_t>(
      std::clamp<int64_t>(by_batch, 1, std::min<int64_t>(s.num_parts, max_blocks)));
}

Status launch_plan(const PlanShape& s, const PlanView& view, const int32_t* seq_lens, int32_t batch,
                   int32_t max_len, cudaStream_t stream, bool pdl) {
  const PlanKernelParams params{.seq_lens = seq_lens,
                                .batch = batch,
                                .max_len = max_len,
                                .fixed_cost_blocks = s.fixed_cost_blocks,
                                .min_chunk_blocks = s.min_chunk_blocks,
                                .view = view};
  auto* kernel = s.schedule == Schedule::kPersistent ? plan_persistent : plan_one_shot;
  MLAKIT_CUDA_RETURN(pdl::launch(kernel, dim3(1), dim3(kPlanThreads), 0, stream, pdl, params));
  return Status::Ok();
}

}  // namespace mlakit::plan
