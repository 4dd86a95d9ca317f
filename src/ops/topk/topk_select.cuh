// The selection shared by the two cluster top-k kernels (sm_90): topk_cluster.cu (each block
// holds its slice's keys in shared memory) and topk_stream.cu (each block streams its slice from
// global memory and keeps only the candidates, the keys at or above a bound from a sample).
//
// The row's histograms are never built in one place: each block keeps its own, and a pick over
// the row (cluster_pick) reads the other blocks' bins through distributed shared memory after a
// cluster barrier. Each block publishes its highest and lowest non-zero bins and its count (warp
// reductions, no block scan); then one warp reads the bins between them from every block, 32 at a
// time from the top, until the count reaches the target (the candidates fill a few dozen bins).
// No remote atomics and nothing to clear in another block: the push of every block's bins into
// every other block's copy, and a block scan to summarize each histogram, cost about 3 us a round
// at 8 blocks a row (H200, bench/results/2026-11-28-h200-topk-stream). A block leaves a histogram
// it published untouched until the next barrier (the two buffers alternate), and waits at a last
// barrier before it exits (others may still read it).
//
// After the first round (the candidates by their keys' top kBits0 bits), the row's k-th largest
// key T lies in a bin B. Where the row has at most kGather keys in B, every block publishes its
// keys in B, reads all of them after one barrier and finds T, and each block's counts above and
// equal to T, by itself (two passes of 10 bits in shared memory): two cluster barriers for the
// whole selection. Otherwise two more rounds over the candidates (10 bits each) and an exchange of
// the blocks' counts. Each warp then writes its keys above T and its share of the row's first
// keys equal to T (ties by the lower position), in position order. Integer counts only:
// deterministic, equal to the cpu reference bit for bit.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "ops/topk/topk.h"
#include "ops/topk/topk_device.cuh"

namespace mlakit::ops::topk_select {

namespace cg = cooperative_groups;

constexpr int kThreads = kTopkClusterThreads;
static_assert(kTopkClusterMax <= kTopkStreamClusterMax && kTopkStreamClusterMax <= 32,
              "a warp reads the blocks' summaries, a lane each");
constexpr int kWarps = kThreads / 32;
constexpr int kBits0 = 12;  // the first round's digit: a key's top bits
constexpr int kBins0 = 1 << kBits0;
constexpr int kBits1 = 10;  // the later rounds' digits
constexpr int kBins1 = 1 << kBits1;
static_assert(kBits0 + 2 * kBits1 == 32, "three rounds cover a key");
static_assert(kBins1 % kThreads == 0, "pick_bin gives each thread a run");
static_assert(kBins0 % kThreads == 0, "the gathered keys are whole rounds of the threads");
// Bins a group: cluster_pick skips whole groups by their sums (summarize's).
constexpr int kGroup = 32;
static_assert(kBins1 / kThreads <= kGroup && kGroup % (kBins0 / kThreads) == 0,
              "a group is whole threads' runs");
// Keys of the bin B of T a row gathers into every block (the fast path).
constexpr int kGather = kBins0;
// Outputs a block stages in shared memory (their positions) before writing them; past it a
// block writes them as it finds them.
constexpr int kStage = kBins0;

// The block scans of the fast path's local passes (pick_bin): warp scans, then the warps' totals
// (no difference measured against cub's default raking scan, H200).
constexpr auto kScan = cub::BLOCK_SCAN_WARP_SCANS;
using BlockScan = cub::BlockScan<int, kThreads, kScan>;

// What a block publishes of a histogram for cluster_pick, or of its keys in B (fast path).
struct Head {
  int hi;     // its highest non-zero bin; -1: none
  int low;    // its lowest non-zero bin; kBins0: none
  int total;  // its count (fast path: its keys in B)
  int above;  // fast path: its candidates in bins above B
};

// The row's pick: the bin where the count from the top reaches the target.
struct Pick {
  bool found;  // the row has at least target keys
  int bin;
  int above;  // the row's keys in higher bins
  int count;  // the row's keys in the bin
  int total;  // the row's keys in the histogram
};

// The shared memory the selection uses (a member of each kernel's own layout).
struct Shared {
  alignas(16) int hist[2][kBins0];         // the block's histograms, alternating; then B's keys
  Head head[2];                            // published with hist[i]
  int group[2][kBins0 / kGroup];           // published with hist[i]: its groups' sums
  alignas(16) int small[kBins1];           // the fast path's local passes
  int warp_above[kWarps];                  // keys > T among each warp's keys
  int warp_equal[kWarps];                  // keys == T
  int block_above[kTopkStreamClusterMax];  // each block's keys > T (either kernel's cluster)
  int block_equal[kTopkStreamClusterMax];
  int seg[kTopkStreamClusterMax + 1];  // fast path: each block's keys in B in the gathered array
  int counter, over;                   // the fast path's keys in B and above B
  int part[3][kWarps];  // summarize: each warp's count, highest and lowest non-zero bins
  Pick pick;
  typename BlockScan::TempStorage scan;
  topk_device::BinPick bin_pick;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The row a cluster's block takes (both cluster kernels: blocks of kThreads, `p.cluster` blocks a
// row, block `rank` of a cluster the slice [rank slice_len, (rank + 1) slice_len)) and this
// thread's warp segment of that slice.
struct RowSlice {
  int64_t r;             // the logits row
  int64_t n;             // the row's valid keys
  const int32_t* pages;  // its request's block table row
  int64_t begin;         // the slice's first position in the row
  int len;               // the slice's valid keys
  int warp, lane;
  int seg_begin, seg_end;  // this warp's segment of the slice
};

// Fills `row`; where the row holds at most k keys, writes it whole (every block of the cluster
// alike, so that no cluster barrier is left waiting) and returns false.
template <typename Params>
__device__ __forceinline__ bool row_slice(const Params& p, unsigned rank, RowSlice& row) {
  const int blocks = p.cluster;
  row.r = blockIdx.x / blocks;
  const int i = static_cast<int>(row.r / p.next_n);
  const int64_t len_i = min(max(int64_t{p.seq_lens[i]}, int64_t{0}), p.max_len);
  row.n = topk_row_length(len_i, p.next_n, static_cast<int>(row.r % p.next_n));
  row.pages = p.block_table + i * p.block_table_stride;
  if (row.n <= p.k) {
    const int64_t stride = int64_t{blocks} * kThreads;
    for (int64_t m = int64_t{rank} * kThreads + threadIdx.x; m < p.k; m += stride) {
      topk_device::emit(p, row.pages, row.r, m, m < row.n ? m : -1);
    }
    return false;
  }
  row.begin = int64_t{rank} * p.slice_len;
  row.len = static_cast<int>(max(min(row.begin + p.slice_len, row.n) - row.begin, int64_t{0}));
  row.warp = static_cast<int>(threadIdx.x) / 32;
  row.lane = static_cast<int>(threadIdx.x) % 32;
  const int seg = static_cast<int>(p.slice_len) / kWarps;
  row.seg_begin = row.warp * seg;
  row.seg_end = min(row.seg_begin + seg, row.len);
  return true;
}

// Publishes the summary of this block's histogram `hist` (kBins bins) in `head` (its highest and
// lowest non-zero bins and its count) and `group` (the sums of its kGroup-bin groups). Ends with a
// barrier.
template <int kBins>
__device__ __forceinline__ void summarize(Shared& s, const int* hist, Head& head, int* group) {
  constexpr int kRun = kBins / kThreads;  // thread t: bins kBins-1-t*kRun downwards
  static_assert(kRun == 2 || kRun == 8, "a run is one 8-byte or two 16-byte loads");
  // The run's bins in 8- or 16-byte loads (one word a thread apart would conflict in the banks).
  const int* const run = hist + kBins - kRun * (threadIdx.x + 1);
  int count[kRun];  // count[e]: bin kBins-1-(threadIdx.x*kRun+e) = run[kRun-1-e]
  if constexpr (kRun == 8) {
    const int4 a = reinterpret_cast<const int4*>(run)[0], b = reinterpret_cast<const int4*>(run)[1];
    const int v[8] = {b.w, b.z, b.y, b.x, a.w, a.z, a.y, a.x};
#pragma unroll
    for (int e = 0; e < 8; ++e) count[e] = v[e];
  } else {
    const int2 a = *reinterpret_cast<const int2*>(run);
    count[0] = a.y;
    count[1] = a.x;
  }
  int sum = 0, hi = -1, low = kBins0;
#pragma unroll
  for (int e = 0; e < kRun; ++e) {
    const int bin = kBins - 1 - (static_cast<int>(threadIdx.x) * kRun + e);
    sum += count[e];
    if (count[e] > 0) hi = max(hi, bin), low = min(low, bin);
  }
  // The group sums: kGroup / kRun consecutive threads hold a group's bins.
  constexpr int kGroupLanes = kGroup / kRun;
  int in_group = sum;
#pragma unroll
  for (int d = 1; d < kGroupLanes; d *= 2) in_group += __shfl_xor_sync(0xffffffffu, in_group, d);
  if (threadIdx.x % kGroupLanes == 0) {
    group[(kBins - kRun * (static_cast<int>(threadIdx.x) + 1)) / kGroup] = in_group;
  }
  const int warp = static_cast<int>(threadIdx.x) / 32;
  sum = __reduce_add_sync(0xffffffffu, sum);
  hi = __reduce_max_sync(0xffffffffu, hi);
  low = __reduce_min_sync(0xffffffffu, low);
  if (threadIdx.x % 32 == 0) s.part[0][warp] = sum, s.part[1][warp] = hi, s.part[2][warp] = low;
  __syncthreads();
  if (threadIdx.x < 32) {
    const bool w = threadIdx.x < kWarps;
    sum = __reduce_add_sync(0xffffffffu, w ? s.part[0][threadIdx.x] : 0);
    hi = __reduce_max_sync(0xffffffffu, w ? s.part[1][threadIdx.x] : -1);
    low = __reduce_min_sync(0xffffffffu, w ? s.part[2][threadIdx.x] : kBins0);
    if (threadIdx.x == 0) head = {.hi = hi, .low = low, .total = sum, .above = 0};
  }
}

// The row's pick over the blocks' histograms hist[which] (kBins bins, filled by each block) for
// `target`: publishes this block's summary in head[which] and group[which], one cluster barrier,
// then reads the bins that can hold the answer from every block, 32 a round from the highest
// non-zero one down. Where the answer is not among the first 32 (a row whose values spread over
// many exponents between its largest and the answer, e.g. around 0: up to about 2000 bins), the
// rounds go on by groups of kGroup bins, then the group's bins: at most 7 rounds, not 128. Every
// block of the cluster gets the same result. hist[which], head[which] and group[which] stay
// untouched until the next cluster barrier.
template <int kBins>
__device__ __forceinline__ Pick cluster_pick(const cg::cluster_group& cluster, int blocks,
                                             Shared& s, int which, int target) {
  summarize<kBins>(s, s.hist[which], s.head[which], s.group[which]);
  cluster.sync();
  if (threadIdx.x < 32) {  // one warp: lane c reads block c's summary, then the bins
    const int lane = static_cast<int>(threadIdx.x);
    Head h = {.hi = -1, .low = kBins0, .total = 0, .above = 0};
    if (lane < blocks) h = *cluster.map_shared_rank(&s.head[which], lane);
    // The row's bin lies between the lowest and the highest non-zero bins of any block.
    const int hi = __reduce_max_sync(0xffffffffu, h.hi);
    const int low = __reduce_min_sync(0xffffffffu, h.low);
    const int total = __reduce_add_sync(0xffffffffu, h.total);
    Pick pick = {
        .found = total >= target && target > 0, .bin = low, .above = 0, .count = 0, .total = total};
    // Rounds of up to 32 entries of `table` (bins, or group sums) summed over the blocks, from
    // `top` down to `floor`: first the 32 bins from the highest (most rows' answer), then the rest
    // of the next bin's group, then whole groups, then the bins of the group that holds the
    // answer. One copy of the round in a loop (four inlined ones spill registers).
    const int* table = s.hist[which];
    int top = hi, floor = low, phase = 0;
    int carry = 0;  // the row's keys above the round's entries
    while (pick.found) {
      const int at = top - lane;  // lane order: from the top down
      int v = 0;
      if (at >= floor) {  // every block's count, the loads issued before the sum
        int part[kTopkStreamClusterMax];
#pragma unroll
        for (int c = 0; c < kTopkStreamClusterMax; ++c) {
          part[c] = c < blocks ? *cluster.map_shared_rank(table + at, c) : 0;
        }
#pragma unroll
        for (int c = 0; c < kTopkStreamClusterMax; ++c) v += part[c];
      }
      int upto = v;  // the row's keys from `top` down to this entry
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int t = __shfl_up_sync(0xffffffffu, upto, d);
        if (lane >= d) upto += t;
      }
      const int above = carry + upto - v;
      const unsigned hit =
          __ballot_sync(0xffffffffu, at >= floor && above < target && above + v >= target);
      if (hit != 0) {
        const int first = __ffs(hit) - 1;
        const int entry = __shfl_sync(0xffffffffu, at, first);
        carry = __shfl_sync(0xffffffffu, above, first);
        if (phase == 2) {  // the group: its bins next
          table = s.hist[which];
          top = entry * kGroup + kGroup - 1;
          floor = entry * kGroup;
          phase = 3;
          continue;
        }
        pick.bin = entry;
        pick.above = carry;
        pick.count = __shfl_sync(0xffffffffu, v, first);
        break;
      }
      carry += __shfl_sync(0xffffffffu, upto, 31);
      if (phase == 0) {  // the rest of the next bin's group (the answer lies below hi - 31)
        top = hi - 32;
        floor = max(low, top & ~(kGroup - 1));
        phase = 1;
      } else if (phase == 1) {  // whole groups
        table = s.group[which];
        top = (hi - 32) / kGroup - 1;
        floor = low / kGroup;
        phase = 2;
      } else if (phase == 2 && top - 32 >= floor) {
        top -= 32;
      } else {
        break;  // not reached: the histograms hold target keys
      }
    }
    if (lane == 0) s.pick = pick;
  }
  __syncthreads();
  return s.pick;  // rewritten only after the next cluster barrier
}

// Finds the row's k-th largest key T and writes row r's outputs: each block the keys of its slice
// (positions begin + j) above T and its share of the row's first keys equal to T, in position
// order. On entry s.hist[first] holds the block's candidates (keys >= bound, every candidate the
// walk visits) by their top kBits0 bits, and s.hist[first ^ 1] was last published in the pick of
// `bound` (its readers are done once they reach the first barrier here).
template <typename Walk>
__device__ __forceinline__ void select_and_write(const cg::cluster_group& cluster, int blocks,
                                                 unsigned rank, const TopkRows& p, int64_t r,
                                                 const int32_t* pages, int64_t begin,
                                                 uint32_t bound, Shared& s, int first, Walk& walk) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const unsigned lower = (1u << lane) - 1u;
  __syncthreads();
  int cur = first;  // the histogram of the last pick
  Pick pick = cluster_pick<kBins0>(cluster, blocks, s, cur, p.k);
  int above_bin = 0;  // the row's keys above the first round's histogram (the fallback's)
  if (!pick.found) {  // fewer than k keys >= bound (every block alike): count the rest
    walk.whole();
    above_bin = pick.total;
    cur ^= 1;
    for (int b = threadIdx.x; b < kBins0; b += kThreads) s.hist[cur][b] = 0;
    __syncthreads();
    walk([&](bool valid, int, uint32_t key) {
      if (valid && key < bound) atomicAdd(&s.hist[cur][key >> (32 - kBits0)], 1);
    });
    __syncthreads();
    pick = cluster_pick<kBins0>(cluster, blocks, s, cur, p.k - above_bin);
  }
  uint32_t prefix = static_cast<uint32_t>(pick.bin) << (32 - kBits0);
  uint32_t mask = ~0u << (32 - kBits0);
  int remaining = p.k - above_bin - pick.above;  // keys matching prefix still to take
  uint32_t threshold;                            // T
  const bool gather = pick.count <= kGather;

  if (gather) {
    // Fast path. This block's keys in B into the other buffer (free: its readers passed the last
    // barrier), its count above B beside them.
    int* const mine = s.hist[cur ^ 1];
    if (threadIdx.x == 0) s.counter = 0, s.over = 0;
    __syncthreads();
    walk([&](bool valid, int, uint32_t key) {
      const bool in = valid && (key & mask) == prefix;
      const unsigned m = __ballot_sync(0xffffffffu, in);
      const int over = __popc(__ballot_sync(0xffffffffu, valid && (key & mask) > prefix));
      int at = 0;
      if (lane == 0 && m != 0) at = atomicAdd(&s.counter, __popc(m));
      at = __shfl_sync(0xffffffffu, at, 0);
      if (in) mine[at + __popc(m & lower)] = static_cast<int>(key);
      if (lane == 0 && over > 0) atomicAdd(&s.over, over);
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      s.head[cur ^ 1] = {.hi = 0, .low = 0, .total = s.counter, .above = s.over};
    }
    cluster.sync();
    // Every block's keys in B, in rank order, into the buffer of the last pick (its readers
    // passed the barrier above).
    int* const keys = s.hist[cur];
    if (warp == 0) {  // lane c: block c's count above B and its keys' place in the gathered array
      Head h = {.hi = 0, .low = 0, .total = 0, .above = 0};
      if (lane < blocks) h = *cluster.map_shared_rank(&s.head[cur ^ 1], lane);
      int end = h.total;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int t = __shfl_up_sync(0xffffffffu, end, d);
        if (lane >= d) end += t;
      }
      if (lane < blocks) s.block_above[lane] = h.above, s.seg[lane + 1] = end;
      if (lane == 0) s.seg[0] = 0;
    }
    __syncthreads();
    const int n_keys = s.seg[blocks];
    {  // every thread's keys (at most kGather / kThreads), the remote loads issued before stores
      constexpr int kPer = kGather / kThreads;
      int value[kPer];
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const int i = static_cast<int>(threadIdx.x) + e * kThreads;
        if (i >= n_keys) continue;
        int c = 0;  // the block key i comes from
#pragma unroll
        for (int d = 1; d < kTopkStreamClusterMax; ++d) c += d < blocks && i >= s.seg[d];
        value[e] = cluster.map_shared_rank(s.hist[cur ^ 1], c)[i - s.seg[c]];
      }
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const int i = static_cast<int>(threadIdx.x) + e * kThreads;
        if (i < n_keys) keys[i] = value[e];
      }
    }
    __syncthreads();
    // The two remaining digits of T among them, here alone.
#pragma unroll 1
    for (int round = 0; round < 2; ++round) {
      const int shift = kBits1 * (1 - round);
      for (int b = threadIdx.x; b < kBins1; b += kThreads) s.small[b] = 0;
      __syncthreads();
      for (int i = threadIdx.x; i < n_keys; i += kThreads) {
        const auto key = static_cast<uint32_t>(keys[i]);
        if ((key & mask) == prefix) atomicAdd(&s.small[(key >> shift) & (kBins1 - 1)], 1);
      }
      __syncthreads();
      topk_device::pick_bin<kBins1, kThreads, kScan>(s.small, remaining, s.scan, &s.bin_pick);
      prefix |= s.bin_pick.bin << shift;
      mask |= static_cast<uint32_t>(kBins1 - 1) << shift;
      remaining -= s.bin_pick.above;
      __syncthreads();  // s.bin_pick
    }
    threshold = prefix;
    // Each block's keys above and equal to T: warp c counts block c's.
    for (int c = warp; c < blocks; c += kWarps) {
      int over = 0, same = 0;
      for (int i = s.seg[c] + lane; i < s.seg[c + 1]; i += 32) {
        const auto key = static_cast<uint32_t>(keys[i]);
        over += key > threshold;
        same += key == threshold;
      }
      over = __reduce_add_sync(0xffffffffu, over);
      same = __reduce_add_sync(0xffffffffu, same);
      if (lane == 0) s.block_above[c] += over, s.block_equal[c] = same;
    }
  } else {
    // Two more rounds over the candidates, then the blocks' counts exchanged.
#pragma unroll 1
    for (int round = 0; round < 2; ++round) {
      const int shift = kBits1 * (1 - round);
      cur ^= 1;
      for (int b = threadIdx.x; b < kBins1; b += kThreads) s.hist[cur][b] = 0;
      __syncthreads();
      walk([&](bool valid, int, uint32_t key) {
        if (valid && (key & mask) == prefix) {
          atomicAdd(&s.hist[cur][(key >> shift) & (kBins1 - 1)], 1);
        }
      });
      __syncthreads();
      pick = cluster_pick<kBins1>(cluster, blocks, s, cur, remaining);
      prefix |= static_cast<uint32_t>(pick.bin) << shift;
      mask |= static_cast<uint32_t>(kBins1 - 1) << shift;
      remaining -= pick.above;
    }
    threshold = prefix;
  }

  // Each warp's keys above and equal to T (all of them >= bound unless the walk is whole).
  int above = 0, equal = 0;
  walk([&](bool valid, int, uint32_t key) {
    above += __popc(__ballot_sync(0xffffffffu, valid && key > threshold));
    equal += __popc(__ballot_sync(0xffffffffu, valid && key == threshold));
  });
  if (lane == 0) {
    s.warp_above[warp] = above;
    s.warp_equal[warp] = equal;
  }
  __syncthreads();
  if (!gather) {  // the blocks' counts: published, one barrier, read
    if (threadIdx.x == 0) {
      int total_above = 0, total_equal = 0;
      for (int w = 0; w < kWarps; ++w) {
        total_above += s.warp_above[w];
        total_equal += s.warp_equal[w];
      }
      s.head[cur ^ 1] = {.hi = 0, .low = 0, .total = total_equal, .above = total_above};
    }
    cluster.sync();
    if (threadIdx.x < static_cast<unsigned>(blocks)) {
      const Head h = *cluster.map_shared_rank(&s.head[cur ^ 1], threadIdx.x);
      s.block_above[threadIdx.x] = h.above;
      s.block_equal[threadIdx.x] = h.total;
    }
  }
  __syncthreads();
  // The last read of another block's shared memory is done; each block waits for the others at
  // its end before it exits.
  auto done = cluster.barrier_arrive();

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
  // written by all threads at once: the page lookups overlap) when they fit, in the buffer of the
  // last pick or the gathered keys (no block reads it any more).
  const int kept = s.block_above[rank] + take;
  const bool staged = kept <= kStage;
  int* const stage = s.hist[cur];
  __syncthreads();  // every thread has read the gathered keys
  if (s.warp_above[warp] > 0 || (s.warp_equal[warp] > 0 && equal_seen < take)) {
    walk([&](bool valid, int j, uint32_t key) {
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
  if (staged) {
    __syncthreads();
    for (int m = threadIdx.x; m < kept; m += kThreads) {
      topk_device::emit(p, pages, r, offset + m, begin + stage[m]);
    }
  }
  cluster.barrier_wait(std::move(done));
}
#endif

}  // namespace mlakit::ops::topk_select
