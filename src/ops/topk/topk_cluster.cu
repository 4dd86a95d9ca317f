// Top-k selection with a thread-block cluster a row (sm_90); the same result as topk.cu,
// topk_multi.cu and the cpu reference, bit for bit.
//
// Schedule (topk_cluster_plan in topk.h): the `cluster` blocks of a cluster share one row. Block c
// (its rank in the cluster) takes the slice [c * slice_len, (c + 1) * slice_len) of the row's
// valid length n and keeps its keys (topk.h's order keys) in shared memory, so the row is read
// from global memory once (float4 loads when every row is 16-byte aligned, kUnroll tiles in
// flight a thread).
//
// Passes over the whole slice in shared memory cost more instructions than the read, so the
// selection runs over candidates: a sample of the row (every 16th key) gives a bound L, the bin
// where the sample's count from the top reaches about 1.5 k / 16 (every block picks it from the
// blocks' sample histograms, topk_select::cluster_pick); each warp compacts the positions of its
// segment's keys >= L, in order, into shared memory (up to kCandPerWarp; past it the block walks
// its whole slice instead) and counts them by their top 12 bits. From there the selection, the
// exchange of the blocks' counts and the writes are topk_select::select_and_write's
// (topk_select.cuh), shared with the streaming kernel: exact above L; where the row has fewer than
// k keys >= L (a sample that misjudged the row), every block also counts the keys below L and
// walks its whole slice from then on. No workspace, nothing to clear. Rows of length n <= k keep
// every position. Graph-capturable: the grid depends on the shapes only; lengths and page ids are
// read on the device.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "core/check.h"
#include "core/cuda_check.h"
#include "kernels/common/pdl.h"
#include "ops/topk/topk.h"
#include "ops/topk/topk_device.cuh"
#include "ops/topk/topk_select.cuh"

namespace mlakit::ops {
namespace {

namespace cg = cooperative_groups;

using topk_select::kBins0;
using topk_select::kBits0;
using topk_select::kThreads;
using topk_select::kWarps;
static_assert(kTopkClusterGrain == kWarps * 32, "warp segments are whole ballots");
// Tiles of kTopkTile keys in flight a thread while a slice loads.
[[maybe_unused]] constexpr int kUnroll = 4;

struct ClusterParams : TopkRows {
  int32_t cluster;    // blocks a row
  int64_t slice_len;  // keys a block, a multiple of kTopkClusterGrain
  bool vec;           // every row 16-byte aligned: float4 loads
};

// The sample: every kSampleStride-th key of a slice (at a rotating offset, so that consecutive
// samples fall in different banks), counted by its top kSampleBits bits.
[[maybe_unused]] constexpr int kSampleStride = 16;
constexpr int kSampleBits = 10;
constexpr int kSampleBins = 1 << kSampleBits;
[[maybe_unused]] constexpr int kCandPerWarp = 2 * kSampleBins / kWarps;
static_assert(kTopkClusterMaxSlice <= 65536, "slice positions fit 16 bits");

struct Shared {
  topk_select::Shared select;
  uint16_t cand[kWarps * kCandPerWarp];  // the warps' candidates (slice positions)
  int warp_cand[kWarps];                 // candidates each warp found (may exceed kCandPerWarp)
};

// The kernel's code is built for sm_90 only (clusters); elsewhere its body is empty.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Reads src[0, len) as keys into keys[0, len).
__device__ __forceinline__ void load_slice(const float* src, int len, bool vec, uint32_t* keys) {
  for (int base = 0; base < len; base += kUnroll * kTopkTile) {
    float4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      x[u] = topk_device::load4(src, base + u * kTopkTile + 4 * static_cast<int>(threadIdx.x), len,
                                vec);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kTopkTile + 4 * static_cast<int>(threadIdx.x);
      // Keys past len in this group of 4 are stored too (the slice's buffer holds them) and
      // never read.
      if (j < len) {
        *reinterpret_cast<uint4*>(keys + j) =
            make_uint4(order_key(x[u].x), order_key(x[u].y), order_key(x[u].z), order_key(x[u].w));
      }
    }
  }
}

// This warp's keys in position order, 32 at a time: its candidates (`cand`, `n` of them) or, when
// cand is null, its whole segment [seg_begin, seg_end) of the slice. f(valid, j, key) runs in
// every lane of the warp the same number of times (ballots may be taken in it); j is the slice
// position.
template <typename F>
__device__ __forceinline__ void walk(const uint16_t* cand, int n, int seg_begin, int seg_end,
                                     const uint32_t* keys, F&& f) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (cand != nullptr) {
    for (int base = 0; base < n; base += 32) {
      const bool valid = base + lane < n;
      const int j = valid ? cand[base + lane] : 0;
      f(valid, j, valid ? keys[j] : 0u);
    }
  } else {
    for (int base = seg_begin; base < seg_end; base += 32) {
      const int j = base + lane;
      const bool valid = j < seg_end;
      f(valid, j, valid ? keys[j] : 0u);
    }
  }
}

// The walk topk_select::select_and_write takes: this warp's candidates while they hold every
// key the rounds need, else its segment of the slice.
struct SliceWalk {
  const uint16_t* cand;  // null: the whole segment
  int n;
  int seg_begin, seg_end;
  const uint32_t* keys;
  __device__ void whole() { cand = nullptr; }
  template <typename F>
  __device__ __forceinline__ void operator()(F&& f) const {
    walk(cand, n, seg_begin, seg_end, keys, f);
  }
};
#endif

__global__ void __launch_bounds__(kThreads, 2)
    topk_cluster_kernel(const __grid_constant__ ClusterParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ uint4 s_keys[];
  uint32_t* keys = reinterpret_cast<uint32_t*>(s_keys);
  __shared__ Shared s;
  pdl::griddepcontrol_wait();  // the logits or the lengths may come from the previous kernel
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  const int blocks = p.cluster;
  topk_select::RowSlice row;
  if (!topk_select::row_slice(p, rank, row)) return;
  const int64_t r = row.r, begin = row.begin;
  const int32_t* const pages = row.pages;
  const int len = row.len;
  const int warp = row.warp, lane = row.lane;
  const unsigned lower = (1u << lane) - 1u;
  const int seg_begin = row.seg_begin, seg_end = row.seg_end;  // this warp's segment

  for (int b = threadIdx.x; b < kBins0; b += kThreads) {
    s.select.hist[0][b] = s.select.hist[1][b] = 0;
  }
  load_slice(p.logits + r * p.ld + begin, len, p.vec, keys);
  __syncthreads();
  // A sample of the row (1/kSampleStride of it) gives a lower bound L: the rounds count only the
  // keys >= L (shared-memory atomics and passes over the whole slice are the costly part).
  for (int c = threadIdx.x; c * kSampleStride < len; c += kThreads) {
    const int j = c * kSampleStride + c % kSampleStride;
    if (j < len) atomicAdd(&s.select.hist[0][keys[j] >> (32 - kSampleBits)], 1);
  }
  __syncthreads();
  // The bin where the sample's count from the top reaches about 1.5 k / kSampleStride (and a
  // margin); the lowest bin when the sample holds fewer.
  const topk_select::Pick sample = topk_select::cluster_pick<kSampleBins>(
      cluster, blocks, s.select, 0, (3 * p.k / 2) / kSampleStride + 16);
  const uint32_t bound = sample.found ? sample.bin << (32 - kSampleBits) : 0u;

  // Each warp's keys >= L in position order (their slice positions); a warp with more than
  // kCandPerWarp of them, and then the whole block, walks the slice instead.
  uint16_t* const mine = s.cand + warp * kCandPerWarp;
  int found = 0;
  for (int base = seg_begin; base < seg_end; base += 32) {
    const int j = base + lane;
    const bool take = j < seg_end && keys[j] >= bound;
    const unsigned m = __ballot_sync(0xffffffffu, take);
    const int at = found + __popc(m & lower);
    if (take && at < kCandPerWarp) mine[at] = static_cast<uint16_t>(j);
    found += __popc(m);
  }
  if (lane == 0) s.warp_cand[warp] = found;
  __syncthreads();
  bool use_cand = true;
  for (int w = 0; w < kWarps; ++w) use_cand = use_cand && s.warp_cand[w] <= kCandPerWarp;
  SliceWalk slice_walk = {.cand = use_cand ? mine : nullptr,
                          .n = found,
                          .seg_begin = seg_begin,
                          .seg_end = seg_end,
                          .keys = keys};

  // First round: the keys >= L by their top bits (exact above L); the rest is shared.
  slice_walk([&](bool valid, int, uint32_t key) {
    if (valid && key >= bound) atomicAdd(&s.select.hist[1][key >> (32 - kBits0)], 1);
  });
  topk_select::select_and_write(cluster, blocks, rank, p, r, pages, begin, bound, s.select, 1,
                                slice_walk);
#endif
}

// The kernel's dynamic shared memory cap: the largest slice's, whatever the call's slice, so that
// calls of other shapes from other host threads (and the occupancy queries) never lower it under
// a launch that needs more.
constexpr int kMaxDynamicSmem = static_cast<int>(kTopkClusterMaxSlice * sizeof(uint32_t));

// Clusters of the plan's shape (its cluster size, its slice's shared memory) that run at once on
// `device` (cudaOccupancyMaxActiveClusters), asked once a device and shape, in relaxed capture
// mode; 0 where the device refuses (then the plan's waves stay unknown). A refusal because the
// call is inside a stream capture is not kept.
struct KnownCapacity {
  int device;
  int32_t cluster;
  int64_t slice_len;
  int clusters;
};
std::mutex capacity_mutex;
std::vector<KnownCapacity> known_capacity;

int cluster_capacity(int device, const TopkClusterPlan& plan) {
  const std::lock_guard<std::mutex> lock(capacity_mutex);
  std::vector<KnownCapacity>& known = known_capacity;
  for (const KnownCapacity& k : known) {
    if (k.device == device && k.cluster == plan.cluster && k.slice_len == plan.slice_len) {
      return k.clusters;
    }
  }
  const RelaxedCaptureMode relaxed;
  const auto smem = static_cast<int>(plan.slice_len * sizeof(uint32_t));
  int clusters = 0;
  cudaError_t e = cudaFuncSetAttribute(
      topk_cluster_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxDynamicSmem);
  if (e == cudaSuccess) {
    cudaLaunchAttribute attribute = pdl::cluster_dimension(static_cast<unsigned>(plan.cluster));
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(plan.cluster));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = static_cast<size_t>(smem);
    config.attrs = &attribute;
    config.numAttrs = 1;
    e = cudaOccupancyMaxActiveClusters(&clusters, topk_cluster_kernel, &config);
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // an answer here, not an error to report later
    clusters = 0;
    if (e >= cudaErrorStreamCaptureUnsupported && e <= cudaErrorStreamCaptureWrongThread) return 0;
  }
  if (known.size() >= 256) known.clear();  // plans come in few shapes; bounded anyway
  known.push_back({device, plan.cluster, plan.slice_len, clusters});
  return clusters;
}

}  // namespace

void topk_cluster_forget_capacity() {
  const std::lock_guard<std::mutex> lock(capacity_mutex);
  known_capacity.clear();
}

Status topk_cluster_plan_here(const TopkArgs& a, TopkClusterPlan* plan) {
  *plan = {};
  int device = 0, major = 0, sms = 0;
  MLAKIT_CUDA_RETURN(cudaGetDevice(&device));
  MLAKIT_CUDA_RETURN(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  // Hopper only: elsewhere the runtime would compile the kernel from the sm_80 PTX, whose body is
  // empty.
  if (major != 9 || binary_version(topk_cluster_kernel) < 90) return Status::Ok();
  MLAKIT_CUDA_RETURN(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t rows = int64_t{a.batch} * a.next_n;
  *plan = topk_cluster_plan(rows, a.max_len, a.k, sms);
  if (plan->cluster > 0) {
    const int clusters = cluster_capacity(device, *plan);
    if (clusters > 0) plan->waves = static_cast<int32_t>((rows + clusters - 1) / clusters);
  }
  return Status::Ok();
}

Status topk_indices_cluster(const TopkArgs& a, int64_t ld, Stream stream) {
  if (int64_t{a.batch} * a.next_n == 0) return Status::Ok();
  TopkClusterPlan plan;
  MLAKIT_RETURN_IF_ERROR(topk_cluster_plan_here(a, &plan));
  if (plan.cluster == 0) {
    return unsupported("the cluster top-k kernel for batch ", a.batch, " next_n ", a.next_n,
                       " max_len ", a.max_len, " k ", a.k,
                       ": it needs sm_90 code on the device and rows of k + 1 to ",
                       kTopkClusterMax * kTopkClusterMaxSlice, " positions");
  }
  return topk_launch_cluster(a, ld, plan, stream);
}

Status topk_launch_cluster(const TopkArgs& a, int64_t ld, const TopkClusterPlan& plan,
                           Stream stream) {
  const int64_t rows = int64_t{a.batch} * a.next_n;
  ClusterParams p;
  static_cast<TopkRows&>(p) = topk_rows(a, ld);
  p.cluster = plan.cluster;
  p.slice_len = plan.slice_len;
  p.vec = ld % 4 == 0 && reinterpret_cast<uintptr_t>(a.logits) % 16 == 0;
  const auto smem = static_cast<size_t>(plan.slice_len) * sizeof(uint32_t);
  MLAKIT_CUDA_RETURN(cudaFuncSetAttribute(
      topk_cluster_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxDynamicSmem));
  // The cluster attribute also for clusters of one block (the kernel's cluster barriers).
  MLAKIT_CUDA_RETURN(pdl::launch_ex(
      topk_cluster_kernel, dim3(static_cast<unsigned>(rows * plan.cluster)), dim3(kThreads), smem,
      static_cast<cudaStream_t>(stream), a.enable_pdl, static_cast<unsigned>(plan.cluster),
      /*cluster_attribute=*/true, p));
  return Status::Ok();
}

}  // namespace mlakit::ops
