// Top-k selection on the GPU, written directly as sparse-decode indices; equal to the cpu
// reference (topk_cpu.cc) bit for bit. This is the kernel without a workspace (and for rows
// shorter than kTopkMultiMinLen); topk_multi.cu gives a long row several blocks.
//
// Schedule: one 512-thread block per row. A row of length n <= k keeps every position. Otherwise
// a radix select on the 32-bit order keys (topk.h) finds the k-th largest key T in four passes of
// 8 bits over the row (a 256-bin shared-memory histogram of the keys that match the digits found
// so far; integer counts, so the result does not depend on the order of the atomics). A last
// pass walks the row in position order, one element a thread, and keeps the keys above T and
// the first `remaining` keys equal to T (ties by the lower position); two block scans give each
// kept element its place, so the output is in increasing position order and deterministic.
// Five reads of the row (L2-resident for rows up to tens of MB across the grid). Measured on the
// H200: 98 us a 32K row, 390 us a 128K row, at batch 1 and 64 alike (docs/ops.md).
// Graph-capturable: the grid is batch * next_n blocks; lengths and page ids are read on the device.
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include "core/check.h"
#include "core/cuda_check.h"
#include "kernels/common/pdl.h"
#include "ops/topk/topk.h"
#include "ops/topk/topk_device.cuh"

namespace mlakit::ops {
namespace {

constexpr int kThreads = 512;
constexpr int kBits = 8;
constexpr int kBins = 1 << kBits;
static_assert(kBins <= kThreads, "the histogram is cleared one bin a thread");

using BlockScan = cub::BlockScan<int, kThreads>;

struct Shared {
  int hist[kBins];
  int digit;
  int remaining;
  typename BlockScan::TempStorage scan;
};

using topk_device::emit;

__global__ void __launch_bounds__(kThreads) topk_kernel(const __grid_constant__ TopkRows p) {
  pdl::griddepcontrol_wait();  // the logits or the lengths may come from the previous kernel
  __shared__ Shared s;
  const int tid = threadIdx.x;
  const int64_t r = blockIdx.x;
  const int i = static_cast<int>(r / p.next_n);
  const int64_t len = min(max(int64_t{p.seq_lens[i]}, int64_t{0}), p.max_len);
  const int64_t n = topk_row_length(len, p.next_n, static_cast<int>(r % p.next_n));
  const int32_t* pages = p.block_table + i * p.block_table_stride;

  if (n <= p.k) {
    for (int64_t m = tid; m < p.k; m += kThreads) emit(p, pages, r, m, m < n ? m : -1);
    return;
  }

  const float* row = p.logits + r * p.ld;
  uint32_t prefix = 0;
  uint32_t mask = 0;
  int remaining = p.k;  // keys still to take at or below the digits found so far
  for (int shift = 32 - kBits; shift >= 0; shift -= kBits) {
    if (tid < kBins) s.hist[tid] = 0;
    __syncthreads();
    for (int64_t j = tid; j < n; j += kThreads) {
      const uint32_t key = order_key(row[j]);
      if ((key & mask) == prefix) atomicAdd(&s.hist[(key >> shift) & (kBins - 1)], 1);
    }
    __syncthreads();
    if (tid == 0) {
      // The largest digit d with (count above d) < remaining <= (count at or above d).
      int above = 0;
      int d = kBins - 1;
      for (; d > 0 && above + s.hist[d] < remaining; --d) above += s.hist[d];
      s.digit = d;
      s.remaining = remaining - above;
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(s.digit) << shift;
    mask |= static_cast<uint32_t>(kBins - 1) << shift;
    remaining = s.remaining;
    __syncthreads();  // s.digit and s.remaining are rewritten by the next pass
  }

  // prefix is the k-th largest key T: keep every key > T and the first `remaining` keys == T.
  const uint32_t threshold = prefix;
  int64_t taken = 0;
  int64_t equal_seen = 0;
  for (int64_t base = 0; base < n && taken < p.k; base += kThreads) {
    const int64_t j = base + tid;
    const uint32_t key = j < n ? order_key(row[j]) : 0;
    const int above = j < n && key > threshold;
    const int equal = j < n && key == threshold;
    int equal_rank, equal_total;
    BlockScan(s.scan).ExclusiveSum(equal, equal_rank, equal_total);
    __syncthreads();
    const int keep = above || (equal && equal_seen + equal_rank < remaining);
    int keep_rank, keep_total;
    BlockScan(s.scan).ExclusiveSum(keep, keep_rank, keep_total);
    __syncthreads();
    if (keep) emit(p, pages, r, taken + keep_rank, j);
    taken += keep_total;
    equal_seen += equal_total;
  }
}

}  // namespace

Status topk_indices_one_block(const TopkArgs& a, int64_t ld, Stream stream) {
  const int64_t rows = int64_t{a.batch} * a.next_n;
  if (rows == 0) return Status::Ok();
  const TopkRows p = topk_rows(a, ld);
  MLAKIT_CUDA_RETURN(pdl::launch(topk_kernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0,
                                 static_cast<cudaStream_t>(stream),
                                 a.enable_pdl && pdl::current_device_takes_pdl(), p));
  MLAKIT_CUDA_RETURN_LAUNCH("topk_kernel");
  return Status::Ok();
}

Status topk_choose_here(const TopkArgs& a, bool with_workspace, TopkKernel* kernel,
                        TopkClusterPlan* plan) {
  const int64_t rows = int64_t{a.batch} * a.next_n;
  TopkClusterPlan cluster, stream;
  MLAKIT_RETURN_IF_ERROR(topk_cluster_plan_here(a, &cluster));
  MLAKIT_RETURN_IF_ERROR(topk_stream_plan_here(a, &stream));
  const bool multi = with_workspace && topk_multi_applies(rows, a.max_len, a.k);
  *kernel = topk_choose(rows, a.max_len, multi, cluster, stream);
  *plan = *kernel == TopkKernel::kStream ? stream : cluster;
  return Status::Ok();
}

Status topk_indices_cuda(const TopkArgs& a, int64_t ld, Stream stream) {
  if (int64_t{a.batch} * a.next_n == 0) return Status::Ok();
  TopkKernel kernel;
  TopkClusterPlan plan;
  MLAKIT_RETURN_IF_ERROR(topk_choose_here(a, a.workspace != nullptr, &kernel, &plan));
  switch (kernel) {
    case TopkKernel::kStream: return topk_launch_stream(a, ld, plan, stream);
    case TopkKernel::kCluster: return topk_launch_cluster(a, ld, plan, stream);
    case TopkKernel::kMultiBlock: return topk_indices_multi(a, ld, stream);
    case TopkKernel::kOneBlock: break;
  }
  return topk_indices_one_block(a, ld, stream);
}

}  // namespace mlakit::ops
