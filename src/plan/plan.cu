// The plan kernels (one CTA each) and the workspace layout; see plan.h for the schedules.
//
// Both kernels read seq_lens once per pass and use only block-wide scans and reductions:
//  - persistent: pass 1 sums the line length (and finds whether all requests cost the same);
//    pass 2 scans each request's line position and writes its metadata and the part boundaries
//    that fall inside it (each boundary lies in exactly one request, or past the line),
//    O(batch / threads + parts) steps.
//  - one-shot: the chunk length (one_shot.cuh), then each request's metadata.
// The decode kernel waits for them. The persistent schedule is planned inside the decode kernel
// instead (part_plan.cuh) unless the batch may be large (launch.cc). Planning in each decode CTA
// (one-shot) cost the CTAs more than the wait saved: batch 8, h_q 16: 29.3 us against 23.1 (H200,
// 2026-11).
#include <algorithm>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda/functional>

#include "core/cuda_check.h"
#include "kernels/common/pdl.h"
#include "plan/one_shot.cuh"
#include "plan/part_plan.cuh"
#include "plan/plan.h"

namespace mlakit::plan {
namespace {

constexpr int kPlanThreads = 256;
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
  return clamped_len(p.seq_lens, i, p.batch, p.max_len);
}

__device__ __forceinline__ PlanInputs plan_inputs(const PlanKernelParams& p) {
  return {.seq_lens = p.seq_lens,
          .batch = p.batch,
          .max_len = p.max_len,
          .block_n = p.view.block_n,
          .fixed_cost_blocks = p.fixed_cost_blocks,
          .min_chunk_blocks = p.min_chunk_blocks,
          .num_parts = p.view.num_parts,
          .max_splits = p.view.max_splits};
}

// Sum, smallest non-zero and largest of the request costs, in one block reduction.
struct CostStats {
  int64_t sum, min, max;
};
struct MergeCostStats {
  __device__ CostStats operator()(const CostStats& a, const CostStats& b) const {
    return {a.sum + b.sum, min(a.min, b.min), max(a.max, b.max)};
  }
};

__global__ void __launch_bounds__(kPlanThreads) plan_persistent(const PlanKernelParams p) {
  using Scan = cub::BlockScan<int64_t, kPlanThreads>;
  using Reduce = cub::BlockReduce<CostStats, kPlanThreads>;
  __shared__ union {
    typename Scan::TempStorage scan;
    typename Reduce::TempStorage reduce;
  } storage;
  __shared__ int64_t s_line, s_per_part, s_fixed;
  __shared__ int64_t s_end[kPlanThreads];     // pass 2: line end of each request of the round
  __shared__ int32_t s_blocks[kPlanThreads];  // and its blocks
  const int32_t block_n = p.view.block_n;
  int64_t fixed = p.fixed_cost_blocks;  // 0 for equal requests cut into parts (below)
  const auto cost_of = [&](int32_t blocks) -> int64_t { return blocks > 0 ? blocks + fixed : 0; };

  // seq_lens may be written by the previous kernel, and the previous call's kernels read the
  // metadata rewritten here.
  pdl::griddepcontrol_wait();
  pdl::griddepcontrol_launch_dependents();

  // Pass 1: the line's length (each request's overhead, then its blocks), and the smallest and
  // largest cost of a non-empty request.
  CostStats stats{0, INT64_MAX, 0};
  for (int32_t base = 0; base < p.batch; base += kPlanThreads) {
    const int64_t cost =
        cost_of(ceil_div(load_len(p, base + static_cast<int32_t>(threadIdx.x)), block_n));
    const CostStats round =
        Reduce(storage.reduce)
            .Reduce(CostStats{cost, cost > 0 ? cost : INT64_MAX, cost}, MergeCostStats{});
    __syncthreads();
    stats = MergeCostStats{}(stats, round);  // valid in thread 0
  }
  const int64_t line = stats.sum, min_cost = stats.min, max_cost = stats.max;
  // Equal costs: boundaries between requests, for at most 1/16 more per part. At batch 64, h_q 128
  // (66 parts) the even cut (130 blocks per part, requests of 134) split every request in two, and
  // the combine of their partials took 17 us of 365 (H200, 2026-11); 134 per part splits none.
  if (threadIdx.x == 0) {
    const PartLength<int64_t> length =
        part_length<int64_t>(line, min_cost, max_cost, fixed, p.view.num_parts, p.min_chunk_blocks);
    s_line = length.line;
    s_per_part = length.per_part;
    s_fixed = length.fixed;
  }
  __syncthreads();
  const int64_t line_length = s_line, per_part = s_per_part;
  fixed = s_fixed;

  // Boundary q (q * per_part on the line) opens part q and closes part q - 1.
  const auto write_boundary = [&](int64_t q, int32_t request, int32_t block) {
    if (q < p.view.num_parts) {
      p.view.parts[q].begin_request = request;
      p.view.parts[q].begin_block = block;
    }
    if (q > 0) {
      p.view.parts[q - 1].end_request = request;
      p.view.parts[q - 1].end_block = block;
    }
  };

  // Pass 2, by rounds of kPlanThreads requests: each request's parts and partial slots (only
  // requests with several chunks use slots); then the boundaries that fall in the round's
  // requests, spread over the threads (a lone request may hold every boundary), each finding its
  // request by binary search over the round's line ends.
  int64_t line_before = 0, slots_before = 0;
  for (int32_t base = 0; base < p.batch; base += kPlanThreads) {
    const int32_t i = base + static_cast<int32_t>(threadIdx.x);
    const int32_t len = load_len(p, i);
    const int32_t blocks = ceil_div(len, block_n);
    int64_t end = 0, line_total = 0;
    Scan(storage.scan).InclusiveSum(cost_of(blocks), end, line_total);
    __syncthreads();
    end += line_before;
    const int64_t first_block_pos = end - blocks;
    int32_t first = 0, splits = 0;
    if (blocks > 0) {
      first = static_cast<int32_t>(first_block_pos / per_part);
      splits = static_cast<int32_t>((first_block_pos + blocks - 1) / per_part) - first + 1;
    }
    int64_t offset = 0, slots_total = 0;
    Scan(storage.scan).ExclusiveSum(int64_t{splits > 1 ? splits : 0}, offset, slots_total);
    if (i < p.batch) {
      p.view.requests[i] = {.seq_len = len,
                            .num_splits = splits,
                            .first = first,
                            .split_offset = static_cast<int32_t>(slots_before + offset)};
    }
    s_end[threadIdx.x] = end;
    s_blocks[threadIdx.x] = blocks;
    __syncthreads();
    const int64_t round_end = line_before + line_total;
    for (int64_t q = ceil_div(line_before, per_part) + threadIdx.x; q * per_part < round_end;
         q += kPlanThreads) {
      const int64_t x = q * per_part;
      int32_t lo = 0, hi = kPlanThreads - 1;  // the first request of the round ending past x
      while (lo < hi) {
        const int32_t mid = (lo + hi) / 2;
        if (s_end[mid] > x) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      write_boundary(q, base + lo,
                     static_cast<int32_t>(max(int64_t{0}, x - (s_end[lo] - s_blocks[lo]))));
    }
    __syncthreads();  // s_end and s_blocks are rewritten by the next round
    line_before = round_end;
    slots_before += slots_total;
  }
  // Boundaries at or past the end of the line: empty parts.
  for (int64_t q = ceil_div(line_length, per_part) + threadIdx.x; q <= p.view.num_parts;
       q += kPlanThreads) {
    write_boundary(q, p.batch, 0);
  }
}

__global__ void __launch_bounds__(kPlanThreads) plan_one_shot(const PlanKernelParams p) {
  using Planner = OneShotPlanner<kPlanThreads>;
  using Scan = cub::BlockScan<int64_t, kPlanThreads>;
  __shared__ union {
    typename Planner::TempStorage planner;
    typename Scan::TempStorage scan;
  } storage;

  pdl::griddepcontrol_wait();
  pdl::griddepcontrol_launch_dependents();

  const PlanInputs in = plan_inputs(p);
  const int64_t chunk = Planner::chunk_blocks(in, storage.planner);
  int64_t slots_before = 0;
  for (int32_t base = 0; base < p.batch; base += kPlanThreads) {
    const int32_t i = base + static_cast<int32_t>(threadIdx.x);
    const OneShotSplit split = one_shot_split(request_blocks(in, i), chunk);
    int64_t offset = 0, total = 0;
    Scan(storage.scan).ExclusiveSum(int64_t{split.splits > 1 ? split.splits : 0}, offset, total);
    __syncthreads();
    if (i < p.batch) {
      p.view.requests[i] = {.seq_len = clamped_len(in, i),
                            .num_splits = split.splits,
                            .first = split.per_chunk,
                            .split_offset = static_cast<int32_t>(slots_before + offset)};
    }
    slots_before += total;
  }
}

}  // namespace

namespace {
int64_t max_line(const PlanShape& s) {
  return int64_t{s.max_batch} * (ceil_div<int64_t>(s.max_seq_len, s.block_n) + s.fixed_cost_blocks);
}
}  // namespace

PlanShape make_plan_shape(const Problem& p, Schedule schedule, int32_t block_n,
                          int32_t fixed_cost_blocks, int32_t min_chunk_blocks,
                          int64_t ctas_per_tile) {
  PlanShape s{.schedule = schedule,
              .block_n = block_n,
              .fixed_cost_blocks = fixed_cost_blocks,
              .min_chunk_blocks = min_chunk_blocks,
              .num_parts = 1,
              .max_batch = p.max_batch,
              .max_seq_len = p.max_seq_len,
              .rows = p.h_q * p.s_q};
  s.num_parts = static_cast<int32_t>(std::clamp<int64_t>(
      std::min<int64_t>(ctas_per_tile, max_line(s) / min_chunk_blocks), 1, INT32_MAX));
  return s;
}

bool plans_in_kernel(const PlanShape& s) {
  return s.schedule == Schedule::kPersistent && s.max_batch <= 512 &&
         4 * max_line(s) + s.num_parts < INT32_MAX;
}

WorkspaceLayout workspace_layout(const PlanShape& s) {
  WorkspaceLayout w;
  if (s.schedule == Schedule::kCluster) {
    // Partials only where a request's tile spans several clusters: at most one per CTA that
    // runs at once (num_parts x tiles), so num_parts slots per request row.
    if (ceil_div<int64_t>(s.max_seq_len, s.block_n) > 1) w.max_slots = s.num_parts;
    size_t at = 0;
    w.requests = at;
    at += align_up(sizeof(RequestMeta) * s.max_batch);
    w.parts = at;
    w.partial_lse = at;
    at += align_up(sizeof(float) * w.max_slots * s.rows);
    w.partial_out = at;
    at += align_up(sizeof(float) * w.max_slots * s.rows * kDv);
    w.bytes = w.max_slots > 0 ? at : 0;
    return w;
  }
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
          .partial_lse = reinterpret_cast<float*>(base + w.partial_lse),
          .partial_out = reinterpret_cast<float*>(base + w.partial_out),
          .block_n = s.block_n,
          .num_parts = s.num_parts,
          .max_splits = max_splits,
          .cluster_size = 1};
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
