// Top-k selection with a thread-block cluster a row that streams the row from global memory once
// and keeps only the candidates (sm_90); the same result as the other top-k kernels and the cpu
// reference, bit for bit.
//
// Schedule (topk_stream_plan in topk.h): the `cluster` blocks of a cluster (up to 16) share one
// row, block c the slice [c * slice_len, (c + 1) * slice_len) of its valid length n, each warp a
// segment of the slice. Unlike topk_cluster.cu, no block holds its slice in shared memory, so two
// 512-thread blocks fit an SM whatever the slice's length, and the plan sizes the slices so that
// a batch runs in one wave of the clusters the device can hold at once.
// 1. A sample of the row (8 consecutive keys of every 128, 1/16 of it, at a rotating offset) is
//    counted by its keys' top 12 bits; every block picks the same bound L from the blocks' counts
//    (topk_select::cluster_pick), the bin where the sample's count from the top reaches about
//    1.5 k / 16 (and a margin).
// 2. Each lane streams 16 consecutive keys at a time (4 float4 loads); a float comparison flags a
//    superset of its keys >= L, the flagged ones are checked exactly, counted by their top 12 bits
//    (the first round of the radix select) and appended with their slice positions, in position
//    order, to the warp's list of 64-entry chunks from the block's pool (kTopkStreamPool).
// 3. topk_select::select_and_write (topk_select.cuh) finds T and writes the outputs, walking the
//    candidates; when the pool ran out, or the row has fewer than k keys >= L, it walks the
//    block's whole slice again from global memory (the rows' L2-resident copy, mostly).
// Three cluster barriers a row and one before the blocks exit where the k-th largest's bin holds
// at most 4096 keys of the row; more otherwise. Integer counts only: deterministic. Rows of length
// n <= k keep every position. Graph-capturable: the grid depends on the shapes only; lengths and
// page ids are read on the device. H200, k 2048, rows of 128K: 23 us at 32 rows, 32 us at 64,
// 42 us at 128 (5.1-6.8x torch.topk; docs/ops.md, "Top-k's speed").
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <mutex>

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
constexpr int kRun = 16;  // consecutive keys a lane reads at once (4 float4 loads)
static_assert(kRun == 16, "pick() selects among 16 keys");
static_assert(kTopkStreamGrain % (int64_t{kWarps} * 4 * 32) == 0,
              "warp segments start 16-byte aligned and on whole lanes' float4");
static_assert(kTopkStreamMaxSlice <= 65536, "slice positions fit 16 bits");
constexpr int kChunk = 64;  // candidates a chunk of a warp's list
constexpr int kChunks = kTopkStreamPool / kChunk;
static_assert(kChunks <= 256, "chunk ids fit 8 bits");
// The sample: kSampleGroup consecutive keys of every kSampleEvery (two float4 loads).
[[maybe_unused]] constexpr int kSampleGroup = 8;
[[maybe_unused]] constexpr int kSampleEvery = 128;
[[maybe_unused]] constexpr int kSampleStride = kSampleEvery / kSampleGroup;

struct StreamParams : TopkRows {
  int32_t cluster;    // blocks a row
  int64_t slice_len;  // keys a block, a multiple of kTopkStreamGrain
  bool vec;           // every row 16-byte aligned: float4 loads
};

struct Shared {
  topk_select::Shared select;
  uint32_t key[kTopkStreamPool];    // the candidates' keys
  uint16_t pos[kTopkStreamPool];    // and their slice positions
  uint8_t chunks[kWarps][kChunks];  // each warp's chunks, in order
  int used;                         // chunks taken from the pool (may pass kChunks)
  int overflow;                     // a warp found the pool empty
};

// The kernel's code is built for sm_90 only (clusters); elsewhere its body is empty.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The float whose order key is `key` (order_key's inverse).
__device__ __forceinline__ float key_value(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key ^ 0x80000000u) : ~key);
}

// x's key e (0 .. kRun - 1) by selects: a register array is not indexed by a run-time value.
__device__ __forceinline__ float pick(const float4 (&x)[kRun / 4], int e) {
  const float4 a = (e & 4) ? x[1] : x[0];
  const float4 b = (e & 4) ? x[3] : x[2];
  const float4 g = (e & 8) ? b : a;
  const float lo = (e & 1) ? g.y : g.x;
  const float hi = (e & 1) ? g.w : g.z;
  return (e & 2) ? hi : lo;
}

// The walk topk_select::select_and_write takes: this warp's candidates in list order (position
// order), or after whole() its segment [seg_begin, seg_end) of the slice read from global memory.
struct StreamWalk {
  bool pool;
  int fill;  // this warp's candidates
  const uint8_t* chunks;
  const uint32_t* keys;
  const uint16_t* pos;
  const float* src;  // the slice
  int seg_begin, seg_end;
  __device__ void whole() { pool = false; }
  template <typename F>
  __device__ __forceinline__ void operator()(F&& f) const {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    if (pool) {
      for (int base = 0; base < fill; base += 32) {
        const int q = base + lane;
        const bool valid = q < fill;
        const int slot = valid ? chunks[q / kChunk] * kChunk + q % kChunk : 0;
        f(valid, valid ? static_cast<int>(pos[slot]) : 0, valid ? keys[slot] : 0u);
      }
    } else {
      for (int base = seg_begin; base < seg_end; base += 32) {
        const int j = base + lane;
        const bool valid = j < seg_end;
        f(valid, j, valid ? order_key(src[j]) : 0u);
      }
    }
  }
};
#endif

__global__ void __launch_bounds__(kThreads, kTopkStreamBlocksPerSm)
    topk_stream_kernel(const __grid_constant__ StreamParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ uint4 s_raw[];
  Shared& s = *reinterpret_cast<Shared*>(s_raw);
  pdl::griddepcontrol_wait();  // the logits or the lengths may come from the previous kernel
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  const int blocks = p.cluster;
  topk_select::RowSlice row;
  if (!topk_select::row_slice(p, rank, row)) return;
  const int64_t r = row.r, begin = row.begin;
  const int32_t* const pages = row.pages;
  const int len = row.len;
  const float* const src = p.logits + r * p.ld + begin;
  const int warp = row.warp, lane = row.lane;
  const int seg_begin = row.seg_begin, seg_end = row.seg_end;  // this warp's segment

  for (int b = threadIdx.x; b < kBins0; b += kThreads) {
    s.select.hist[0][b] = s.select.hist[1][b] = 0;
  }
  if (threadIdx.x == 0) s.used = s.overflow = 0;
  __syncthreads();
  // 1. The sample: float4 v of the slice's sample is half v % 2 of group v / 2.
  for (int v = threadIdx.x; v < 2 * ((len + kSampleEvery - 1) / kSampleEvery); v += kThreads) {
    const int g = v / 2;
    const int j = g * kSampleEvery + (g * kSampleGroup) % kSampleEvery + (v % 2) * 4;
    const float4 x = topk_device::load4(src, j, len, p.vec);
    const float xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (j + e < len) atomicAdd(&s.select.hist[0][order_key(xs[e]) >> (32 - kBits0)], 1);
    }
  }
  __syncthreads();
  // The bin where the sample's count from the top reaches about 1.5 k / kSampleStride (and a
  // margin); the lowest bin when the sample holds fewer.
  const topk_select::Pick sample = topk_select::cluster_pick<kBins0>(
      cluster, blocks, s.select, 0, (3 * p.k / 2) / kSampleStride + 16);
  const uint32_t bound = sample.found ? sample.bin << (32 - kBits0) : 0u;

  // 2. The stream: lane l of a warp reads the kRun keys at base + kRun l (kRun / 4 float4 loads);
  // its keys >= L go to the warp's chunks in position order (an inclusive scan of the lanes'
  // counts gives each lane its place) and are counted by their top bits. A float comparison with
  // L's value, !(x < value), flags a superset of the keys >= L (it also takes NaNs and -0 where L
  // is +0); only the flagged keys are checked exactly.
  const float bound_value = key_value(bound);
  uint8_t* const my_chunks = s.chunks[warp];
  int fill = 0, owned = 0;
  bool full = false;
  for (int base = seg_begin; base < seg_end; base += 32 * kRun) {
    const int j0 = base + kRun * lane;
    float4 x[kRun / 4];
#pragma unroll
    for (int u = 0; u < kRun / 4; ++u) x[u] = topk_device::load4(src, j0 + 4 * u, seg_end, p.vec);
    unsigned flags = 0;
#pragma unroll
    for (int u = 0; u < kRun / 4; ++u) {
      flags |= (!(x[u].x < bound_value) ? 1u : 0u) << (4 * u);
      flags |= (!(x[u].y < bound_value) ? 2u : 0u) << (4 * u);
      flags |= (!(x[u].z < bound_value) ? 4u : 0u) << (4 * u);
      flags |= (!(x[u].w < bound_value) ? 8u : 0u) << (4 * u);
    }
    const int valid = seg_end - j0;  // keys of this lane inside the segment
    if (valid < kRun) flags &= valid > 0 ? (1u << valid) - 1u : 0u;
    // The exact test of the flagged keys, one a pass (warp-wide, as many passes as the lane with
    // the most flags needs).
    unsigned take = 0;
    for (unsigned f = flags; __any_sync(0xffffffffu, f != 0);) {
      if (f == 0) continue;
      const int e = __ffs(f) - 1;
      f &= f - 1;
      const uint32_t key = order_key(pick(x, e));
      if (key >= bound) {
        take |= 1u << e;
        atomicAdd(&s.select.hist[1][key >> (32 - kBits0)], 1);
      }
    }
    const int count = __popc(take);
    int before = count;  // inclusive scan over the lanes
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int t = __shfl_up_sync(0xffffffffu, before, d);
      if (lane >= d) before += t;
    }
    const int total = __shfl_sync(0xffffffffu, before, 31);
    before -= count;
    if (total == 0 || full) continue;  // warp-uniform
    const int need = (fill + total + kChunk - 1) / kChunk - owned;
    if (need > 0) {
      int ok = 1;
      if (lane == 0) {
        const int first = atomicAdd(&s.used, need);
        if (first + need > kChunks) {
          ok = 0;
          s.overflow = 1;
        } else {
          for (int c = 0; c < need; ++c) my_chunks[owned + c] = static_cast<uint8_t>(first + c);
        }
      }
      ok = __shfl_sync(0xffffffffu, ok, 0);
      __syncwarp();
      if (!ok) {
        full = true;
        continue;
      }
      owned += need;
    }
    int q = fill + before;
    for (unsigned t = take; __any_sync(0xffffffffu, t != 0);) {
      if (t == 0) continue;
      const int e = __ffs(t) - 1;
      t &= t - 1;
      const int slot = my_chunks[q / kChunk] * kChunk + q % kChunk;
      s.key[slot] = order_key(pick(x, e));
      s.pos[slot] = static_cast<uint16_t>(j0 + e);
      ++q;
    }
    fill += total;
  }
  __syncthreads();  // s.overflow

  // 3. The rounds over the candidates (the whole slice again where the pool ran out) and the
  // writes.
  StreamWalk walk = {.pool = s.overflow == 0,
                     .fill = fill,
                     .chunks = my_chunks,
                     .keys = s.key,
                     .pos = s.pos,
                     .src = src,
                     .seg_begin = seg_begin,
                     .seg_end = seg_end};
  topk_select::select_and_write(cluster, blocks, rank, p, r, pages, begin, bound, s.select, 1,
                                walk);
#endif
}

constexpr int kWaveDevices = 64;
std::mutex wave_mutex;
TopkWave waves[kWaveDevices];
bool wave_known[kWaveDevices] = {};

// The clusters of each size that run at once on `device` (cudaOccupancyMaxActiveClusters), asked
// once a device, in relaxed capture mode (the first call may come inside a capture). A size the
// device refuses (past 8 where it allows no non-portable clusters, or a MIG slice with fewer SMs)
// counts as 0 clusters: the plan does not take it, and the other sizes and kernels stay
// available. (A refusal because the call is inside a stream capture is not kept: the next call
// asks again.)
Status stream_wave(int device, TopkWave* wave) {
  const std::lock_guard<std::mutex> lock(wave_mutex);
  if (device >= 0 && device < kWaveDevices && wave_known[device]) {
    *wave = waves[device];
    return Status::Ok();
  }
  const RelaxedCaptureMode relaxed;
  constexpr size_t kSmem = sizeof(Shared);
  MLAKIT_CUDA_RETURN(cudaFuncSetAttribute(
      topk_stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
  const bool non_portable =
      cudaFuncSetAttribute(topk_stream_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
      cudaSuccess;
  (void)cudaGetLastError();  // a refusal is an answer here, not an error to report later
  *wave = {};
  bool keep = true;  // an answer refused only because a stream is being captured is not kept
  for (int c = 1; c <= (non_portable ? kTopkStreamClusterMax : kTopkClusterMax); ++c) {
    cudaLaunchAttribute attribute = pdl::cluster_dimension(static_cast<unsigned>(c));
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(c));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = kSmem;
    config.attrs = &attribute;
    config.numAttrs = 1;
    const cudaError_t e =
        cudaOccupancyMaxActiveClusters(&wave->clusters[c], topk_stream_kernel, &config);
    if (e != cudaSuccess) {
      wave->clusters[c] = 0;
      keep =
          keep && (e < cudaErrorStreamCaptureUnsupported || e > cudaErrorStreamCaptureWrongThread);
      (void)cudaGetLastError();
    }
  }
  if (keep && device >= 0 && device < kWaveDevices) {
    waves[device] = *wave;
    wave_known[device] = true;
  }
  return Status::Ok();
}

}  // namespace

void topk_forget_occupancy() {
  {
    const std::lock_guard<std::mutex> lock(wave_mutex);
    for (bool& known : wave_known) known = false;
  }
  topk_cluster_forget_capacity();
}

bool topk_stream_wave_known(int device) {
  const std::lock_guard<std::mutex> lock(wave_mutex);
  return device >= 0 && device < kWaveDevices && wave_known[device];
}

Status topk_stream_plan_here(const TopkArgs& a, TopkClusterPlan* plan) {
  *plan = {};
  int device = 0, major = 0;
  MLAKIT_CUDA_RETURN(cudaGetDevice(&device));
  MLAKIT_CUDA_RETURN(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  // Hopper only: elsewhere the runtime would compile the kernel from the sm_80 PTX, whose body is
  // empty.
  if (major != 9 || binary_version(topk_stream_kernel) < 90) return Status::Ok();
  TopkWave wave;
  MLAKIT_RETURN_IF_ERROR(stream_wave(device, &wave));
  *plan = topk_stream_plan(int64_t{a.batch} * a.next_n, a.max_len, a.k, wave);
  return Status::Ok();
}

Status topk_indices_stream(const TopkArgs& a, int64_t ld, Stream stream) {
  if (int64_t{a.batch} * a.next_n == 0) return Status::Ok();
  TopkClusterPlan plan;
  MLAKIT_RETURN_IF_ERROR(topk_stream_plan_here(a, &plan));
  if (plan.cluster == 0) {
    return unsupported("the streaming top-k kernel for batch ", a.batch, " next_n ", a.next_n,
                       " max_len ", a.max_len, " k ", a.k,
                       ": it needs sm_90 code on the device, rows of k + 1 to ",
                       kTopkStreamClusterMax * kTopkStreamMaxSlice,
                       " positions, and about 1.5 k + 256 candidates a row within a third of ",
                       kTopkStreamPool, " a block");
  }
  return topk_launch_stream(a, ld, plan, stream);
}

Status topk_launch_stream(const TopkArgs& a, int64_t ld, const TopkClusterPlan& plan,
                          Stream stream) {
  const int64_t rows = int64_t{a.batch} * a.next_n;
  StreamParams p;
  static_cast<TopkRows&>(p) = topk_rows(a, ld);
  p.cluster = plan.cluster;
  p.slice_len = plan.slice_len;
  p.vec = ld % 4 == 0 && reinterpret_cast<uintptr_t>(a.logits) % 16 == 0;
  constexpr size_t kSmem = sizeof(Shared);
  MLAKIT_CUDA_RETURN(cudaFuncSetAttribute(
      topk_stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
  if (plan.cluster > kTopkClusterMax) {
    MLAKIT_CUDA_RETURN(cudaFuncSetAttribute(topk_stream_kernel,
                                            cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  }
  // The cluster attribute also for clusters of one block (the kernel's cluster barriers).
  MLAKIT_CUDA_RETURN(pdl::launch_ex(
      topk_stream_kernel, dim3(static_cast<unsigned>(rows * plan.cluster)), dim3(kThreads), kSmem,
      static_cast<cudaStream_t>(stream), a.enable_pdl, static_cast<unsigned>(plan.cluster),
      /*cluster_attribute=*/true, p));
  return Status::Ok();
}

}  // namespace mlakit::ops
