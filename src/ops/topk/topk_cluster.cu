// Top-k selection with a thread-block cluster a row (sm_90); the same result as topk.cu,
// topk_multi.cu and the cpu reference, bit for bit.
//
// Schedule (topk_cluster_plan in topk.h): the `cluster` blocks of a cluster share one row. Block c
// (its rank in the cluster) takes the slice [c * slice_len, (c + 1) * slice_len) of the row's
// valid length n and keeps its keys (topk.h's order keys) in shared memory, so the row is read
// from global memory once (float4 loads when every row is 16-byte aligned, kUnroll tiles in
// flight a thread). The k-th largest key T is found by a radix select of three rounds on the
// keys' top 12 bits, then the next 10 and the last 10: each block counts its keys that match the
// digits found so far in a shared-memory histogram and adds its non-zero bins into the round's
// row histogram of every block of the cluster (atomics on distributed shared memory); after one
// cluster barrier every block picks the same digit from its copy.
//
// Passes over the whole slice in shared memory cost more instructions than the read, so the
// rounds run over candidates: a sample of the row (every 16th key, its histogram exchanged the
// same way) gives a bound L, the bin where the sample's count from the top reaches about
// 1.5 k / 16; each warp compacts the positions of its segment's keys >= L, in order, into shared
// memory (up to kCandPerWarp; past it the block walks its whole slice in every later pass). The
// first round is exact above L; when the row has fewer than k keys >= L (a sample that misjudged
// the row), every block also counts the keys below L and walks its whole slice from then on.
//
// Then each warp counts the keys above T and equal to T among its candidates; the blocks
// exchange their totals (one more barrier), so each knows its output offset and how many of its
// keys equal to T it keeps (the row's first ones by position: ties by the lower position), and
// each warp finds its kept keys in position order (ballots) and stages their positions in shared
// memory; then all threads write them (their page lookups overlap). Integer counts only:
// deterministic. Five cluster barriers a row, six with the fallback (no block touches another's
// shared memory after the last one); no workspace, nothing to clear. Rows of length n <= k keep
// every position. Graph-capturable: the grid depends on the shapes only; lengths and page ids
// are read on the device.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include "core/check.h"
#include "core/cuda_check.h"
#include "kernels/common/pdl.h"
#include "ops/topk/topk.h"
#include "ops/topk/topk_device.cuh"

namespace mlakit::ops {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = kTopkClusterThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kBits0 = 12;  // the first round's digit: a key's top bits
constexpr int kBins0 = 1 << kBits0;
constexpr int kBits1 = 10;  // the second and third rounds' digits
constexpr int kBins1 = 1 << kBits1;
static_assert(kBits0 + 2 * kBits1 == 32, "three rounds cover a key");
static_assert(kTopkClusterGrain == kWarps * 32, "warp segments are whole ballots");
// Tiles of kTopkTile keys in flight a thread while a slice loads.
[[maybe_unused]] constexpr int kUnroll = 4;

using BlockScan = cub::BlockScan<int, kThreads>;

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
// Outputs a block stages in shared memory (their positions) before writing them; past it a
// block writes them as it finds them (k above 8192 with few blocks a row).
[[maybe_unused]] constexpr int kStage = 2 * kBins0;
// Candidates (keys at or above the sample's bound) a warp keeps, their slice positions in order.
[[maybe_unused]] constexpr int kCandPerWarp = 2 * kSampleBins / kWarps;
static_assert(kTopkClusterMaxSlice <= 65536, "slice positions fit 16 bits");

struct Shared {
  // [0]: this block's histogram of the round; [1]: the row's first-round histogram (every block
  // of the cluster adds to it). Both together: the staged outputs once the selection is done.
  int hist[2][kBins0];
  int row1[kBins1];  // the row's second- and third-round histograms
  int row2[kBins1];
  // The row's sample histogram; once the bound is picked, the warps' candidates (uint16
  // positions, kCandPerWarp a warp).
  int row_sample[kSampleBins];
  int warp_cand[kWarps];             // candidates each warp found (may exceed kCandPerWarp)
  int warp_above[kWarps];            // keys > T in each warp's segment
  int warp_equal[kWarps];            // keys == T
  int block_above[kTopkClusterMax];  // each block's totals, written by that block
  int block_equal[kTopkClusterMax];
  typename BlockScan::TempStorage scan;
  topk_device::BinPick pick;
};

// The kernel's code is built for sm_90 only (clusters); elsewhere its body is empty.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ float4 load4(const float* src, int j, int len, bool vec) {
  if (vec && j + 3 < len) return *reinterpret_cast<const float4*>(src + j);
  return make_float4(j < len ? src[j] : 0.0f, j + 1 < len ? src[j + 1] : 0.0f,
                     j + 2 < len ? src[j + 2] : 0.0f, j + 3 < len ? src[j + 3] : 0.0f);
}

// Reads src[0, len) as keys into keys[0, len).
__device__ __forceinline__ void load_slice(const float* src, int len, bool vec, uint32_t* keys) {
  for (int base = 0; base < len; base += kUnroll * kTopkTile) {
    float4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      x[u] = load4(src, base + u * kTopkTile + 4 * static_cast<int>(threadIdx.x), len, vec);
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

// Adds this block's non-zero bins `local` into `row_hist` of every block of the cluster, starting
// with the next rank (the blocks do not all start at rank 0).
template <int kBins>
__device__ __forceinline__ void push(const cg::cluster_group& cluster, int blocks, unsigned rank,
                                     const int* local, int* row_hist) {
  for (int b = threadIdx.x; b < kBins; b += kThreads) {
    const int v = local[b];
    if (v == 0) continue;
    for (int c = 1; c <= blocks; ++c) {
      atomicAdd(cluster.map_shared_rank(row_hist + b, (rank + c) % blocks), v);
    }
  }
}
#endif

__global__ void __launch_bounds__(kThreads, 2)
    topk_cluster_kernel(const __grid_constant__ ClusterParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ uint4 s_keys[];
  uint32_t* keys = reinterpret_cast<uint32_t*>(s_keys);
  __shared__ Shared s;
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  const int blocks = p.cluster;
  const int64_t r = blockIdx.x / blocks;
  const int i = static_cast<int>(r / p.next_n);
  const int64_t len_i = min(max(int64_t{p.seq_lens[i]}, int64_t{0}), p.max_len);
  const int64_t n = topk_row_length(len_i, p.next_n, static_cast<int>(r % p.next_n));
  const int32_t* pages = p.block_table + i * p.block_table_stride;
  if (n <= p.k) {  // every block of the cluster alike: no barrier is left waiting
    const int64_t stride = int64_t{blocks} * kThreads;
    for (int64_t m = int64_t{rank} * kThreads + threadIdx.x; m < p.k; m += stride) {
      topk_device::emit(p, pages, r, m, m < n ? m : -1);
    }
    return;
  }
  const int64_t begin = int64_t{rank} * p.slice_len;
  const int len = static_cast<int>(max(min(begin + p.slice_len, n) - begin, int64_t{0}));
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const unsigned lower = (1u << lane) - 1u;
  const int seg = static_cast<int>(p.slice_len) / kWarps;  // each warp's segment of the slice
  const int seg_begin = warp * seg;
  const int seg_end = min(seg_begin + seg, len);

  int* const local = s.hist[0];
  int* const row0 = s.hist[1];
  for (int b = threadIdx.x; b < kBins0; b += kThreads) local[b] = row0[b] = 0;
  for (int b = threadIdx.x; b < kBins1; b += kThreads) s.row1[b] = s.row2[b] = 0;
  for (int b = threadIdx.x; b < kSampleBins; b += kThreads) s.row_sample[b] = 0;
  __syncthreads();
  // The row histograms are cleared before any block adds to them (the wait below).
  auto cleared = cluster.barrier_arrive();
  load_slice(p.logits + r * p.ld + begin, len, p.vec, keys);
  __syncthreads();
  // A sample of the row (1/kSampleStride of it) gives a lower bound L: the rounds count only the
  // keys >= L (shared-memory atomics and passes over the whole slice are the costly part).
  for (int c = threadIdx.x; c * kSampleStride < len; c += kThreads) {
    const int j = c * kSampleStride + c % kSampleStride;
    if (j < len) atomicAdd(&local[keys[j] >> (32 - kSampleBits)], 1);
  }
  __syncthreads();
  cluster.barrier_wait(std::move(cleared));
  push<kSampleBins>(cluster, blocks, rank, local, s.row_sample);
  __syncthreads();
  for (int b = threadIdx.x; b < kSampleBins; b += kThreads) local[b] = 0;
  if (threadIdx.x == 0) s.pick = {.bin = 0, .above = 0};
  cluster.sync();
  // The bin where the sample's count from the top reaches about 1.5 k / kSampleStride (and a
  // margin); the lowest bin when the sample holds fewer.
  topk_device::pick_bin<kSampleBins, kThreads>(s.row_sample, (3 * p.k / 2) / kSampleStride + 16,
                                               s.scan, &s.pick);
  const uint32_t bound = s.pick.bin << (32 - kSampleBits);

  // Each warp's keys >= L in position order (their slice positions); a warp with more than
  // kCandPerWarp of them, and then the whole block, walks the slice instead.
  uint16_t* const mine = reinterpret_cast<uint16_t*>(s.row_sample) + warp * kCandPerWarp;
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
  // This warp's keys to walk: its candidates, or (cand null) its segment.
  const uint16_t* walk_cand = use_cand ? mine : nullptr;
  const int n_cand = found;

  // First round: the keys >= L by their top bits (exact above L).
  walk(walk_cand, n_cand, seg_begin, seg_end, keys, [&](bool valid, int, uint32_t key) {
    if (valid && key >= bound) atomicAdd(&local[key >> (32 - kBits0)], 1);
  });
  __syncthreads();
  push<kBins0>(cluster, blocks, rank, local, row0);
  if (threadIdx.x == 0) s.pick = {.bin = ~0u, .above = 0};
  cluster.sync();
  topk_device::pick_bin<kBins0, kThreads>(row0, p.k, s.scan, &s.pick);
  const bool below = s.pick.bin == ~0u;  // fewer than k keys >= L (every block alike)
  if (below) {  // count the rest; the candidates no longer hold every key the rounds need
    walk_cand = nullptr;
    for (int b = threadIdx.x; b < kBins0; b += kThreads) local[b] = 0;
    __syncthreads();
    walk(nullptr, 0, seg_begin, seg_end, keys, [&](bool valid, int, uint32_t key) {
      if (valid && key < bound) atomicAdd(&local[key >> (32 - kBits0)], 1);
    });
    __syncthreads();
    cluster.sync();  // every block has picked from row0 before any adds to it again
    push<kBins0>(cluster, blocks, rank, local, row0);
    cluster.sync();
    topk_device::pick_bin<kBins0, kThreads>(row0, p.k, s.scan, &s.pick);
  }
  uint32_t prefix = s.pick.bin << (32 - kBits0);
  uint32_t mask = ~0u << (32 - kBits0);
  int remaining = p.k - s.pick.above;  // keys matching prefix still to take

  int* const row_hist[2] = {s.row1, s.row2};
#pragma unroll 1
  for (int round = 0; round < 2; ++round) {
    const int shift = kBits1 * (1 - round);
    for (int b = threadIdx.x; b < kBins1; b += kThreads) local[b] = 0;
    __syncthreads();
    walk(walk_cand, n_cand, seg_begin, seg_end, keys, [&](bool valid, int, uint32_t key) {
      if (valid && (key & mask) == prefix) atomicAdd(&local[(key >> shift) & (kBins1 - 1)], 1);
    });
    __syncthreads();
    push<kBins1>(cluster, blocks, rank, local, row_hist[round]);
    cluster.sync();
    topk_device::pick_bin<kBins1, kThreads>(row_hist[round], remaining, s.scan, &s.pick);
    prefix |= s.pick.bin << shift;
    mask |= static_cast<uint32_t>(kBins1 - 1) << shift;
    remaining -= s.pick.above;
  }
  const uint32_t threshold = prefix;  // T: keep every key > T and the row's first `remaining` == T

  // Each warp's keys above and equal to T (all of them >= L unless `below`).
  int above = 0, equal = 0;
  walk(walk_cand, n_cand, seg_begin, seg_end, keys, [&](bool valid, int, uint32_t key) {
    above += __popc(__ballot_sync(0xffffffffu, valid && key > threshold));
    equal += __popc(__ballot_sync(0xffffffffu, valid && key == threshold));
  });
  if (lane == 0) {
    s.warp_above[warp] = above;
    s.warp_equal[warp] = equal;
  }
  __syncthreads();
  if (threadIdx.x < static_cast<unsigned>(blocks)) {
    int total_above = 0, total_equal = 0;
    for (int w = 0; w < kWarps; ++w) {
      total_above += s.warp_above[w];
      total_equal += s.warp_equal[w];
    }
    *cluster.map_shared_rank(s.block_above + rank, threadIdx.x) = total_above;
    *cluster.map_shared_rank(s.block_equal + rank, threadIdx.x) = total_equal;
  }
  cluster.sync();  // the last access to another block's shared memory is before this

  // This block's output offset and keys == T kept (the first `take` of its slice).
  int offset = 0, take = 0, equal_before = 0;
  for (int c = 0; c < blocks; ++c) {
    const int e = s.block_equal[c];
    const int t = min(e, max(remaining - equal_before, 0));
    if (c == static_cast<int>(rank)) {
      take = t;
      break;
    }
    offset += s.block_above[c] + t;
    equal_before += e;
  }
  int above_seen = 0, equal_seen = 0;  // in the block's earlier warps
  for (int w = 0; w < warp; ++w) {
    above_seen += s.warp_above[w];
    equal_seen += s.warp_equal[w];
  }
  // The block's outputs: offset + 0 .. kept - 1. Staged (their positions in shared memory, then
  // written by all threads at once: the page lookups overlap) when they fit.
  const int kept = s.block_above[rank] + take;
  const bool staged = kept <= kStage;
  int* const stage = &s.hist[0][0];  // no block reads this one's histograms any more
  if (s.warp_above[warp] > 0 || (s.warp_equal[warp] > 0 && equal_seen < take)) {
    walk(walk_cand, n_cand, seg_begin, seg_end, keys, [&](bool valid, int j, uint32_t key) {
      const unsigned a = __ballot_sync(0xffffffffu, valid && key > threshold);
      const unsigned e = __ballot_sync(0xffffffffu, valid && key == threshold);
      const int a_before = above_seen + __popc(a & lower);
      const int e_before = equal_seen + __popc(e & lower);
      if (valid && (key > threshold || (key == threshold && e_before < take))) {
        const int m = a_before + min(e_before, take);
        if (staged) {
          stage[m] = j;
        } else {
          topk_device::emit(p, pages, r, offset + m, begin + j);
        }
      }
      above_seen += __popc(a);
      equal_seen += __popc(e);
    });
  }
  if (!staged) return;
  __syncthreads();
  for (int m = threadIdx.x; m < kept; m += kThreads) {
    topk_device::emit(p, pages, r, offset + m, begin + stage[m]);
  }
#endif
}

}  // namespace

Status topk_cluster_plan_here(const TopkArgs& a, TopkClusterPlan* plan) {
  *plan = {};
  int device = 0, major = 0, sms = 0;
  MLAKIT_CUDA_RETURN(cudaGetDevice(&device));
  MLAKIT_CUDA_RETURN(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 9 || binary_version(topk_cluster_kernel) < 90) return Status::Ok();
  MLAKIT_CUDA_RETURN(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  *plan = topk_cluster_plan(int64_t{a.batch} * a.next_n, a.max_len, a.k, sms);
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
      topk_cluster_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  // The cluster attribute also for clusters of one block (the kernel's cluster barriers).
  cudaLaunchAttribute attribute = pdl::cluster_dimension(static_cast<unsigned>(plan.cluster));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(rows * plan.cluster));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = static_cast<cudaStream_t>(stream);
  config.attrs = &attribute;
  config.numAttrs = 1;
  MLAKIT_CUDA_RETURN(cudaLaunchKernelEx(&config, topk_cluster_kernel, p));
  return Status::Ok();
}

}  // namespace mlakit::ops
