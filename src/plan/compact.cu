// The device compaction of sparse indices (compact.h).
#include <bit>
#include <cub/block/block_scan.cuh>

#include "core/check.h"
#include "core/cuda_check.h"
#include "kernels/common/pdl.h"
#include "mlakit/cp.h"
#include "plan/compact.h"

namespace mlakit::plan {
namespace {

constexpr int kCompactThreads = 256;
// Indices per thread per pass: a pass keeps 2048 slots with one scan, all its loads in flight.
constexpr int kPerThread = 8;

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

using Scan = cub::BlockScan<int32_t, kCompactThreads>;

// Appends the kept indices of one list's first n of idx to out[kept...] as slots (with `flag`).
__device__ __forceinline__ void compact_list(const CompactList& l, const int32_t* idx, int32_t n,
                                             int32_t flag, int32_t* out, int32_t& kept,
                                             int32_t& dropped, typename Scan::TempStorage& scan) {
  for (int32_t k0 = 0; k0 < n; k0 += kCompactThreads * kPerThread) {
    // Thread t takes kPerThread consecutive slots, so its kept ones stay in order after the scan.
    const int32_t first = k0 + static_cast<int32_t>(threadIdx.x) * kPerThread;
    int32_t v[kPerThread];
    int32_t count = 0;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) v[i] = first + i < n ? idx[first + i] : -1;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const bool keep = v[i] >= 0 && v[i] < l.num_tokens;
      dropped += v[i] != -1 && !keep ? 1 : 0;
      count += keep ? 1 : 0;
    }
    int32_t at = 0, total = 0;
    Scan(scan).ExclusiveSum(count, at, total);
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      if (v[i] >= 0 && v[i] < l.num_tokens) {
        // Padded pages: the slot of the index's token at page_pitch tokens a page.
        const int32_t slot = pitched_slot(v[i], l.page_size, l.page_pitch);
        out[kept + at++] = slot | flag;
      }
    }
    kept += total;
    __syncthreads();  // the scan's storage is reused
  }
}

__global__ void __launch_bounds__(kCompactThreads) compact_kernel(const CompactParams p) {
  __shared__ typename Scan::TempStorage scan;
  pdl::griddepcontrol_wait();  // the indices and lengths may come from the previous kernel
  const int64_t r = blockIdx.x;
  const int32_t request = static_cast<int32_t>(r / p.s_q);
  auto length = [&](const CompactList& l) {
    return l.topk_lens == nullptr ? l.topk : min(max(l.topk_lens[request], 0), l.topk);
  };
  int32_t n = length(p.main), n_extra = p.extra.topk > 0 ? length(p.extra) : 0;
  // var_q: the row's indices are packed row cu[request] + t; a token past q_len keeps nothing.
  int64_t row = r;
  if (p.cu_seqlens_q != nullptr) {
    const int32_t t = static_cast<int32_t>(r - int64_t{request} * p.s_q);
    const int32_t first = p.cu_seqlens_q[request];
    if (t >= int64_t{p.cu_seqlens_q[request + 1]} - first) n = n_extra = 0;
    row = int64_t{first} + t;
  }
  int32_t* out = p.slots + r * (p.main.topk + p.extra.topk);
  int32_t kept = 0, dropped = 0;
  compact_list(p.main, p.main.indices + row * p.main.topk, n, 0, out, kept, dropped, scan);
  if (n_extra > 0) {
    compact_list(p.extra, p.extra.indices + row * p.extra.topk, n_extra, kExtraSlot, out, kept,
                 dropped, scan);
  }
  if (threadIdx.x == 0) p.counts[r] = kept;
  if (p.dropped != nullptr && dropped > 0) atomicAdd(p.dropped, dropped);
  pdl::griddepcontrol_launch_dependents();
}

}  // namespace

Problem rows_as_requests(const Problem& p) {
  if (!p.sparse()) {
    Problem d = p;
    d.max_seq_len = static_cast<int32_t>(cp_local_max_seq_len(p));
    return d;
  }
  Problem d = p;
  d.s_q = 1;
  d.max_batch = p.max_batch * p.s_q;
  d.max_seq_len = p.topk + p.extra_topk;
  d.causal = false;
  return d;
}

size_t compact_bytes(int64_t rows, int32_t topk) {
  return align_up(sizeof(int32_t) * static_cast<size_t>(rows)) +
         align_up(sizeof(int32_t) * static_cast<size_t>(rows) * static_cast<size_t>(topk));
}

Status v4_page_pitches(const Problem& problem, const RunArgs& args, std::string_view backend,
                       int32_t* main_pitch, int32_t* extra_pitch) {
  const auto pitch = [](int32_t page_size) {
    return static_cast<int32_t>(std::bit_ceil(static_cast<uint32_t>(page_size)));
  };
  constexpr int64_t kSlots = int64_t{kExtraSlot};
  *main_pitch = pitch(problem.page_size);
  *extra_pitch = problem.has_extra() ? pitch(problem.extra_page_size_or_default()) : 0;
  if (args.num_pages > kSlots / *main_pitch) {
    return invalid_argument("num_pages",
                            str_cat("at most ", kSlots / *main_pitch, " for backend ", backend,
                                    "'s V4 reads (page_size ", problem.page_size,
                                    " read at a pitch of ", *main_pitch, " tokens)"),
                            args.num_pages);
  }
  if (problem.has_extra() && args.extra_num_pages > kSlots / *extra_pitch) {
    return invalid_argument(
        "extra_num_pages",
        str_cat("at most ", kSlots / *extra_pitch, " for backend ", backend,
                "'s V4 reads (extra page size ", problem.extra_page_size_or_default(),
                " read at a pitch of ", *extra_pitch, " tokens)"),
        args.extra_num_pages);
  }
  return Status::Ok();
}

CompactParams compact_params(const Problem& problem, const RunArgs& args, void* region) {
  const int64_t rows = int64_t{problem.max_batch} * problem.s_q;
  auto* base = static_cast<uint8_t*>(region);
  CompactParams p{};
  p.main = {.indices = args.indices,
            .topk_lens = args.topk_lens,
            .num_tokens = args.num_pages * problem.page_size,
            .topk = problem.topk,
            .page_size = problem.page_size,
            .page_pitch = problem.page_size};
  if (problem.has_extra()) {
    const int32_t page = problem.extra_page_size_or_default();
    p.extra = {.indices = args.extra_indices,
               .topk_lens = args.extra_topk_lens,
               .num_tokens = args.extra_num_pages * page,
               .topk = problem.extra_topk,
               .page_size = page,
               .page_pitch = page};
  }
  p.cu_seqlens_q = problem.var_q ? args.cu_seqlens_q : nullptr;
  p.counts = reinterpret_cast<int32_t*>(base);
  p.slots =
      reinterpret_cast<int32_t*>(base + align_up(sizeof(int32_t) * static_cast<size_t>(rows)));
  p.s_q = problem.s_q;
  return p;
}

int32_t padded_page_pitch(int64_t page_stride, int64_t token_stride, int64_t num_pages) {
  if (token_stride <= 0 || page_stride % token_stride != 0) return 0;
  const int64_t pitch = page_stride / token_stride;
  if (pitch > INT32_MAX || (num_pages > 0 && pitch > INT32_MAX / num_pages)) return 0;
  return static_cast<int32_t>(pitch);
}

Status launch_compact(const CompactParams& params, int64_t rows, cudaStream_t stream, bool pdl) {
  if (rows < 1) return Status::Ok();
  MLAKIT_CUDA_RETURN(pdl::launch(compact_kernel, dim3(static_cast<unsigned>(rows)),
                                 dim3(kCompactThreads), 0, stream, pdl, params));
  return Status::Ok();
}

}  // namespace mlakit::plan
