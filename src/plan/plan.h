// Split-KV planning, shared by the GPU backends: how the KV tokens of a batch are cut into chunks,
// which CTA handles which chunk, where partial results go in the workspace, and the tiny kernel
// that computes all of it on the device from `seq_lens` (so that `run` never reads device memory
// from the host and a replayed CUDA graph re-plans for the new lengths). The persistent schedule
// is computed inside the decode kernel instead, each CTA its own part (part_plan.cuh), unless the
// batch may be large.
//
// Three schedules (the backends' tactics; cluster only in sm90):
//  - persistent: a grid of `num_parts` CTAs per query tile (sized to the SM count). The tokens of
//    the batch are laid on one line, request after request, in blocks of `block_n` tokens, each
//    request preceded by `fixed_cost_blocks` of overhead (its Q load, epilogue and combine);
//    part p takes the blocks whose line position falls in [p*Q, (p+1)*Q), Q = ceil(line / parts)
//    (at least `min_chunk_blocks`; when all requests cost the same, rounded up by at most 1/16 so
//    that boundaries fall between requests or cut each into equal parts). When equal requests are
//    cut into parts, the line leaves the overhead out: every part pays it alike (its own Q load
//    and epilogue), and with it in, the request's first part got that many blocks fewer and the
//    others as many more (h_q 16, b 64, L 4096 on sm80: 26 + 3 x 34 tiles instead of 4 x 32).
//    A part therefore owns a contiguous range of (request, block) work, and a request that spans
//    several parts produces several partials (FlashMLA-style).
//  - one-shot: a grid of `max_splits` CTAs per request (and query tile), CTA s * batch + r for
//    chunk s of request r. One chunk length for the batch, priced by waves of `num_parts` CTAs
//    (one_shot.cuh; at least `min_chunk_blocks` blocks, at most `max_splits` chunks per request);
//    CTAs past their request's last chunk exit at once.
//  - cluster (sm90): a grid of C x S CTAs per request and query tile, launched as clusters of S
//    (blockIdx.x = ((request * tiles + tile) * C + c) * S + k; C and S chosen per call from the
//    batch, S at most 8); split j = c * S + k takes blocks [j * n, (j + 1) * n) of its request,
//    n = ceil(blocks / (C S)), possibly none. The S CTAs of a cluster merge their results through
//    distributed shared memory; with C = 1 that is the output (no plan kernel, no workspace, no
//    combine kernel), else partial c of the request in slot request * C + c, which the combine
//    kernel merges (work.cuh, the sm90 kernel, which also writes the requests' metadata).
// Either way (persistent or one-shot) a request with one chunk is written directly; a request with
// k > 1 chunks writes k partials (fp32 out, natural-log LSE) into consecutive slots from
// `split_offset`, and the combine kernel (kernels/common/combine.h) merges them. A request of
// length 0 has no chunk: the combine kernel writes its zeros and -inf LSE.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "mlakit/mlakit.h"

namespace mlakit::plan {

template <typename T>
__host__ __device__ constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

enum class Schedule : int32_t {
  kPersistent = 0,
  kOneShot = 1,
  kCluster = 2,
};

// Per request, written by the plan kernel (or, persistent with the plan in the decode kernel, by
// its CTA 0: part_plan.cuh). 16 bytes: one vector load.
struct alignas(16) RequestMeta {
  int32_t seq_len;       // clamped to [0, max_len]
  int32_t num_splits;    // chunks: 0 (empty request), 1 (written directly) or more (partials)
  int32_t first;         // persistent: the part of the first chunk; one-shot: blocks per chunk
  int32_t split_offset;  // first partial slot when num_splits > 1
};

// Per part of the persistent schedule: blocks [begin, end) in (request, block) order.
struct alignas(16) PartMeta {
  int32_t begin_request, begin_block;
  int32_t end_request, end_block;  // end_request == batch: to the end of the batch
};

// One persistent part as the decode kernel's CTAs keep it (in shared memory; plan/part_plan.cuh):
// blocks [begin, end) in (request, block) order, and the partial slot of its chunk of the first and
// of the last request (-1: the chunk is the whole request). Every request in between lies wholly in
// the part, so it is written directly.
struct PartPlan {
  int32_t begin_request, begin_block;
  int32_t end_request, end_block;  // end_request == batch: to the end of the batch
  int32_t begin_slot, end_slot;
};

// The static facts a plan depends on (fixed at Decoder creation).
struct PlanShape {
  Schedule schedule = Schedule::kPersistent;
  int32_t block_n = 32;           // tokens per block, the unit of work
  int32_t fixed_cost_blocks = 4;  // persistent: cost of one request beyond its blocks
  int32_t min_chunk_blocks = 1;   // smallest chunk worth splitting off
  int32_t num_parts = 1;          // CTAs per query tile working at once (persistent grid size)
  int32_t max_batch = 1;
  int32_t max_seq_len = 0;
  int32_t rows = 1;  // query rows per request (s_q * h_q)
};

// Workspace layout: byte offsets from the (256-aligned) workspace base; each region 256-aligned.
//   requests     RequestMeta [max_batch]
//   parts        PartMeta [num_parts]                 (persistent only)
//   partial_lse  float [max_slots, rows]              natural log, -inf for no visible token
//   partial_out  float [max_slots, rows, 512]         normalized by its own softmax sum
// max_slots bounds the partials of one call: at most 2 * (num_parts - 1) for the persistent
// schedule (each part boundary splits at most one request) and 2 * num_parts for one-shot (the
// plan's rule L >= total / slots keeps it: only requests longer than a chunk split, into fewer
// than 2 * len / L pieces; other chunk lengths are checked against it), and never more than
// max_batch * ceil(max_seq_len / block_n); 0 when no request can span two blocks.
struct WorkspaceLayout {
  size_t requests = 0, parts = 0, partial_lse = 0, partial_out = 0;
  size_t bytes = 0;
  int64_t max_slots = 0;
};
WorkspaceLayout workspace_layout(const PlanShape& shape);

// The plan shape of a backend's split-KV decode for `problem`: num_parts is `ctas_per_tile` (the
// CTAs of one query tile that run at once), but no more than the largest batch can fill with
// chunks of min_chunk_blocks, so that a small batch does not launch CTAs that only exit.
PlanShape make_plan_shape(const Problem& problem, Schedule schedule, int32_t block_n,
                          int32_t fixed_cost_blocks, int32_t min_chunk_blocks,
                          int64_t ctas_per_tile);

// Persistent: whether each decode CTA plans its own part (part_plan.cuh) and no plan kernel runs.
// Not when the batch may be large: every CTA's one warp passes over the whole batch (32 requests
// per step), which past 512 requests would cost more than the plan kernel's 256-thread scans
// (estimated, not measured); and its 32-bit arithmetic needs the line (with the 1/16 rounding of
// aligned parts and the boundaries up to num_parts) to fit.
bool plans_in_kernel(const PlanShape& shape);

// Device pointers into one workspace, passed by value to the kernels.
struct PlanView {
  RequestMeta* requests;  // [max_batch]
  PartMeta* parts;        // [num_parts]
  float* partial_lse;     // [max_slots, rows]
  float* partial_out;     // [max_slots, rows, 512]
  int32_t block_n;
  int32_t num_parts;     // persistent: parts per query tile
  int32_t max_splits;    // one-shot: CTAs per request; cluster: CTAs per request and tile (C S)
  int32_t cluster_size;  // cluster: CTAs per cluster (S); 1 otherwise
};
PlanView plan_view(const PlanShape& shape, const WorkspaceLayout& layout, void* workspace,
                   int max_splits);

// One-shot: CTAs per request for a batch of `batch` (host side, from static facts only): enough
// that a single long request can still be cut into about num_parts chunks when the batch is small,
// about two per request otherwise, and no more than the longest request has blocks.
int32_t one_shot_max_splits(const PlanShape& shape, int32_t batch);

// Launches the plan kernel for `batch` requests: reads seq_lens[0:batch] (clamped to
// [0, max_len]) and writes the requests (and, persistent, parts) metadata of `view`.
Status launch_plan(const PlanShape& shape, const PlanView& view, const int32_t* seq_lens,
                   int32_t batch, int32_t max_len, cudaStream_t stream, bool pdl);

}  // namespace mlakit::plan
