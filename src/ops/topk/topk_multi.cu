// Top-k selection with several blocks a row (rows of kTopkMultiMinLen positions and more, given a
// workspace); the same result as topk.cu and the cpu reference, bit for bit.
//
// Schedule (the plan in topk.h: a row cut into `slices` slices, one 512-thread block each, the
// blocks of all rows a 1-D grid), after a memset that clears the row histograms and counters:
//   1. topk_histogram: each block counts its slice's keys by their top 12 bits in shared memory
//      and adds the non-zero bins to the row's histogram (global atomics). The row's last block
//      (a ticket counter, threadFenceReduction's pattern) finds the bin B holding the k-th
//      largest key and how many of the k are in higher bins.
//   2. topk_candidates: each block counts its slice's keys in bins above B and appends the keys of
//      bin B (and on the sort path, k < kTopkSortItems and slices of kTopkSortMinSlice keys and
//      more, of the bins above it: fewer than k), with their
//      positions, to the row's candidate buffer: gathered in shared memory, then copied with one
//      atomic a block (the buffer's order does not matter). The row's last block refines: two
//      10-bit radix passes over bin B's candidates give the k-th largest key T and how many keys
//      equal to T are kept. Sort path: when every key above T and every key equal to T is a
//      candidate and they number at most kTopkSortItems, it marks the row for pass 3's sort and
//      stops. Otherwise it counts per slice the candidates above and equal to T, and two block
//      scans over the slices give each slice the keys equal to T it keeps (the first ones in
//      position order: ties by the lower position) and its output offset. When bin B holds more
//      keys than the buffer (heavy ties), the refine reads the whole row instead (slow, still
//      exact).
//   3. topk_emit: sort path rows: the row's first block gathers the candidates >= T, sorts them by
//      position (one block radix sort) and writes the keys above T and the first equal ones, in
//      position order; the row itself is not read again. Other rows: each block walks its slice
//      in position order, 2048 keys at a time (float4 loads when every row is 16-byte aligned; the
//      next tile loads while one is written), and writes the keys above T and its first equal
//      keys at its offset, their places from one block scan of packed (above, equal) counts; it
//      stops once its `kept` outputs are written.
// Integer counts and scans only, so the result does not depend on the order of the atomics:
// deterministic (the sort path's order is by position, and positions are distinct). With
// TopkArgs::deterministic false (opt-in) the sort path skips its sort: its rows' kept positions
// come in the gather's order, and which keys equal to T are kept depends on it. The row is
// read twice on the sort path (three times otherwise); the later passes mostly hit L2. Rows of
// length n <= k keep every position (written by pass 3). Graph-capturable: the grid depends on the
// shapes only; lengths and page ids are read on the device.
// Measured (docs/ops.md, "Top-k's speed"; H100, k 2048): 21.6-25.0 us a row of 16K-256K at
// batch 1, 44.0 us for 64 rows of 32K and 72.1 us for 64 of 128K (107.7 before the sort path).
#include <cuda_runtime.h>

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "core/check.h"
#include "core/cuda_check.h"
#include "ops/topk/topk.h"
#include "ops/topk/topk_device.cuh"

namespace mlakit::ops {
namespace {

constexpr int kThreads = kTopkMultiThreads;
constexpr int kTopShift = 32 - kTopkTopBits;  // a key's top bits: key >> kTopShift
constexpr int kRefineBits = 10;
constexpr int kRefineBins = 1 << kRefineBits;
static_assert(kTopShift % kRefineBits == 0, "the refine passes cover the bits below the top ones");

// The rows (TopkRows) and the multi-block schedule's slices and workspace.
struct MultiParams : TopkRows {
  int32_t slices;
  int64_t slice_len;
  bool vec;             // every row 16-byte aligned: float4 loads
  bool keep_above;      // the candidates also hold the keys above the k-th largest's bin
  bool ordered;         // TopkArgs::deterministic: the sort path sorts its kept positions
  int32_t cand_cap;     // candidates a row
  int32_t* hist;        // [rows, kTopkTopBins]
  TopkRowState* state;  // [rows]
  TopkSlice* slice;     // [rows, slices]
  uint2* cand;          // [rows, cand_cap] {key, position}
};

using BlockScan = cub::BlockScan<int, kThreads>;
using BlockReduce = cub::BlockReduce<int, kThreads>;
constexpr int kSortPerThread = kTopkSortItems / kThreads;
using BlockSort = cub::BlockRadixSort<uint32_t, kThreads, kSortPerThread, uint32_t>;
// Candidates a pass-2 block gathers in shared memory before it copies them to the row's buffer
// with one atomic; past it a thread appends to the buffer itself (rare: many candidates in one
// slice).
constexpr int kStageEntries = 2048;

// The row and slice of this block.
struct RowView {
  int64_t r;
  int slice;
  int64_t n;  // the row's valid length
  const float* row;
  const int32_t* pages;
};

__device__ __forceinline__ RowView row_view(const MultiParams& p) {
  const int64_t b = blockIdx.x;
  const int64_t r = b / p.slices;
  const int i = static_cast<int>(r / p.next_n);
  const int64_t len = min(max(int64_t{p.seq_lens[i]}, int64_t{0}), p.max_len);
  return {.r = r,
          .slice = static_cast<int>(b % p.slices),
          .n = topk_row_length(len, p.next_n, static_cast<int>(r % p.next_n)),
          .row = p.logits + r * p.ld,
          .pages = p.block_table + i * p.block_table_stride};
}

// Writes output m of the block's row: position pos (-1 = none) and its cache slot.
__device__ __forceinline__ void emit(const MultiParams& p, const RowView& v, int64_t m,
                                     int64_t pos) {
  topk_device::emit(p, v.pages, v.r, m, pos);
}

// The keys of row[j .. j + 3] (0 past end). j is a multiple of 4 from the row's start.
__device__ __forceinline__ void load_keys(const float* row, int64_t j, int64_t end, bool vec,
                                          uint32_t (&key)[4]) {
  if (vec && j + 3 < end) {
    const float4 x = *reinterpret_cast<const float4*>(row + j);
    key[0] = order_key(x.x);
    key[1] = order_key(x.y);
    key[2] = order_key(x.z);
    key[3] = order_key(x.w);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) key[e] = j + e < end ? order_key(row[j + e]) : 0u;
  }
}

// f(position, key) for every position of [begin, end), 4 consecutive ones a thread, in no
// particular order; two tiles' loads in flight a thread.
template <typename F>
__device__ __forceinline__ void for_each_key(const float* row, int64_t begin, int64_t end, bool vec,
                                             F&& f) {
  for (int64_t j = begin + 4 * int64_t{threadIdx.x}; j < end; j += 2 * kTopkTile) {
    uint32_t key[2][4];
    load_keys(row, j, end, vec, key[0]);
    load_keys(row, j + kTopkTile, end, vec, key[1]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t at = j + h * kTopkTile + e;
        if (at < end) f(at, key[h][e]);
      }
    }
  }
}

// True in every thread of the last of `blocks` blocks to pass `counter`; the global writes the
// others made before it are visible to that block (__ldcg).
__device__ __forceinline__ bool last_block(int32_t* counter, int blocks, int* s_flag) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *s_flag = atomicAdd(counter, 1) == blocks - 1;
  __syncthreads();
  const bool last = *s_flag != 0;
  if (last) __threadfence();
  return last;
}

using topk_device::BinPick;

template <int kBins>
__device__ __forceinline__ void pick_bin(const int* s_hist, int remaining,
                                         typename BlockScan::TempStorage& scan, BinPick* out) {
  topk_device::pick_bin<kBins, kThreads>(s_hist, remaining, scan, out);
}

// Pass 1: the row's histogram of the keys' top bits; its last block picks the bin B.
__global__ void __launch_bounds__(kThreads) topk_histogram(const __grid_constant__ MultiParams p) {
  __shared__ int s_hist[kTopkTopBins];
  __shared__ typename BlockScan::TempStorage s_scan;
  __shared__ BinPick s_pick;
  __shared__ int s_last;
  const RowView v = row_view(p);
  if (v.n <= p.k) return;  // every block of the row alike
  for (int b = threadIdx.x; b < kTopkTopBins; b += kThreads) s_hist[b] = 0;
  __syncthreads();
  const int64_t begin = v.slice * p.slice_len;
  const int64_t end = min(begin + p.slice_len, v.n);
  for_each_key(v.row, begin, end, p.vec,
               [&](int64_t, uint32_t key) { atomicAdd(&s_hist[key >> kTopShift], 1); });
  __syncthreads();
  int32_t* g_hist = p.hist + v.r * kTopkTopBins;
  for (int b = threadIdx.x; b < kTopkTopBins; b += kThreads) {
    if (s_hist[b] != 0) atomicAdd(&g_hist[b], s_hist[b]);
  }
  TopkRowState* st = p.state + v.r;
  if (!last_block(&st->hist_done, p.slices, &s_last)) return;
  for (int b = threadIdx.x; b < kTopkTopBins; b += kThreads) s_hist[b] = __ldcg(&g_hist[b]);
  __syncthreads();
  pick_bin<kTopkTopBins>(s_hist, p.k, s_scan, &s_pick);
  if (threadIdx.x == 0) {
    st->bin = s_pick.bin;
    st->bin_count = s_hist[s_pick.bin];
    st->remaining = p.k - s_pick.above;
  }
}

struct RefineShared {
  int hist[kRefineBins];
  int above[kTopkMaxSlices];  // candidates > T per slice
  int equal[kTopkMaxSlices];  // candidates == T per slice
  typename BlockScan::TempStorage scan;
  BinPick pick;
};

// The candidates the row's blocks appended (the buffer's first entries).
__device__ __forceinline__ int candidate_count(const MultiParams& p, const RowView& v) {
  return min(__ldcg(&p.state[v.r].cand_count), p.cand_cap);
}

// f(position, key) for every key of bin B: from the candidate buffer (which may also hold keys of
// higher bins, skipped here), or from the whole row when the bin did not fit it.
template <typename F>
__device__ __forceinline__ void for_each_candidate(const MultiParams& p, const RowView& v,
                                                   uint32_t bin, int count, F&& f) {
  if (count <= kTopkCandidates) {
    const uint2* cand = p.cand + v.r * p.cand_cap;
    const int total = candidate_count(p, v);
    for (int c = threadIdx.x; c < total; c += kThreads) {
      const uint2 e = __ldcg(&cand[c]);
      if ((e.x >> kTopShift) == bin) f(int64_t{e.y}, e.x);
    }
  } else {
    for_each_key(v.row, 0, v.n, p.vec, [&](int64_t j, uint32_t key) {
      if ((key >> kTopShift) == bin) f(j, key);
    });
  }
}

// The row's last block of pass 2: T, then each slice's offset and equal keys kept.
__device__ __forceinline__ void refine(const MultiParams& p, const RowView& v, RefineShared& s) {
  TopkRowState* st = p.state + v.r;
  const uint32_t bin = st->bin;
  const int count = st->bin_count;
  uint32_t prefix = bin << kTopShift;
  uint32_t mask = ~0u << kTopShift;
  int remaining = st->remaining;  // keys of bin B to keep, 1..count
  int equal_keys = 0;             // keys == T (the last pass's bin)
  for (int shift = kTopShift - kRefineBits; shift >= 0; shift -= kRefineBits) {
    for (int b = threadIdx.x; b < kRefineBins; b += kThreads) s.hist[b] = 0;
    __syncthreads();
    for_each_candidate(p, v, bin, count, [&](int64_t, uint32_t key) {
      if ((key & mask) == prefix) atomicAdd(&s.hist[(key >> shift) & (kRefineBins - 1)], 1);
    });
    __syncthreads();
    pick_bin<kRefineBins>(s.hist, remaining, s.scan, &s.pick);
    prefix |= s.pick.bin << shift;
    mask |= static_cast<uint32_t>(kRefineBins - 1) << shift;
    remaining -= s.pick.above;
    equal_keys = s.hist[s.pick.bin];
    __syncthreads();  // s.pick and s.hist are rewritten next
  }
  const uint32_t threshold = prefix;  // T; keep every key > T and `remaining` keys == T

  // The sort path: every kept key and every key == T is a candidate, and they fit one sort.
  if (p.keep_above && count <= kTopkCandidates && p.k - remaining + equal_keys <= kTopkSortItems) {
    if (threadIdx.x == 0) {
      st->threshold = threshold;
      st->remaining = remaining;
      st->fast = 1;
    }
    return;
  }

  for (int t = threadIdx.x; t < p.slices; t += kThreads) s.above[t] = s.equal[t] = 0;
  __syncthreads();
  for_each_candidate(p, v, bin, count, [&](int64_t j, uint32_t key) {
    const int t = static_cast<int>(j / p.slice_len);
    if (key > threshold) atomicAdd(&s.above[t], 1);
    if (key == threshold) atomicAdd(&s.equal[t], 1);
  });
  __syncthreads();
  // Slice t (thread t): its equal keys kept are the first ones of the row's `remaining`.
  TopkSlice* slices = p.slice + v.r * p.slices;
  const int t = threadIdx.x;
  const bool has = t < p.slices;
  const int equal = has ? s.equal[t] : 0;
  const int above = has ? s.above[t] + __ldcg(&slices[t].above_bin) : 0;
  int equal_before;
  BlockScan(s.scan).ExclusiveSum(equal, equal_before);
  __syncthreads();
  const int take = min(equal, max(remaining - equal_before, 0));
  const int kept = above + take;
  int offset;
  BlockScan(s.scan).ExclusiveSum(kept, offset);
  if (has) {
    slices[t].offset = offset;
    slices[t].take_equal = take;
    slices[t].kept = kept;
  }
  if (t == 0) st->threshold = threshold;
}

// Pass 2: the candidates (the keys of bin B, and of the bins above it when p.keep_above) and the
// counts above B; the row's last block refines.
__global__ void __launch_bounds__(kThreads) topk_candidates(const __grid_constant__ MultiParams p) {
  __shared__ union {
    typename BlockReduce::TempStorage reduce;
    RefineShared refine;
  } s;
  __shared__ uint2 s_stage[kStageEntries];
  __shared__ int s_staged;
  __shared__ int s_base;
  __shared__ int s_last;
  const RowView v = row_view(p);
  if (v.n <= p.k) return;
  TopkRowState* st = p.state + v.r;
  const uint32_t bin = st->bin;
  const bool compact = st->bin_count <= kTopkCandidates;
  uint2* cand = p.cand + v.r * p.cand_cap;
  if (threadIdx.x == 0) s_staged = 0;
  __syncthreads();
  int above = 0;
  const int64_t begin = v.slice * p.slice_len;
  const int64_t end = min(begin + p.slice_len, v.n);
  for_each_key(v.row, begin, end, p.vec, [&](int64_t j, uint32_t key) {
    const uint32_t top = key >> kTopShift;
    above += top > bin;
    if ((top == bin && compact) || (top > bin && p.keep_above)) {
      const uint2 e = make_uint2(key, static_cast<uint32_t>(j));
      const int at = atomicAdd(&s_staged, 1);
      if (at < kStageEntries) {
        s_stage[at] = e;
      } else {
        const int g = atomicAdd(&st->cand_count, 1);
        if (g < p.cand_cap) cand[g] = e;
      }
    }
  });
  __syncthreads();
  const int staged = min(s_staged, kStageEntries);
  if (threadIdx.x == 0) s_base = staged > 0 ? atomicAdd(&st->cand_count, staged) : 0;
  __syncthreads();
  for (int i = threadIdx.x; i < staged; i += kThreads) {
    if (s_base + i < p.cand_cap) cand[s_base + i] = s_stage[i];
  }
  const int total = BlockReduce(s.reduce).Sum(above);
  if (threadIdx.x == 0) p.slice[v.r * p.slices + v.slice].above_bin = total;
  if (!last_block(&st->cand_done, p.slices, &s_last)) return;
  refine(p, v, s.refine);
}

// The sort path of a row (its first emit block): the candidates >= T gathered, sorted by position
// (positions are distinct, so the order is the row's whatever order they were appended in), the
// keys > T and the first `remaining` keys == T written in that order. Without p.ordered, in the
// order they were gathered (not sorted; which equal keys are kept then depends on that order).
__device__ __forceinline__ void emit_sorted(const MultiParams& p, const RowView& v) {
  __shared__ union {
    struct {
      uint32_t pos[kTopkSortItems];
      uint32_t kind[kTopkSortItems];  // 1: key > T, 2: key == T
    } gather;
    typename BlockSort::TempStorage sort;
    typename BlockScan::TempStorage scan;
  } s;
  __shared__ int s_count;
  const TopkRowState* st = p.state + v.r;
  const uint32_t threshold = __ldcg(&st->threshold);
  const int remaining = __ldcg(&st->remaining);
  if (threadIdx.x == 0) s_count = 0;
  __syncthreads();
  const uint2* cand = p.cand + v.r * p.cand_cap;
  const int total = candidate_count(p, v);
  for (int c = threadIdx.x; c < total; c += kThreads) {
    const uint2 e = __ldcg(&cand[c]);
    if (e.x >= threshold) {
      const int at = atomicAdd(&s_count, 1);  // < kTopkSortItems (the refine's check)
      s.gather.pos[at] = e.y;
      s.gather.kind[at] = e.x > threshold ? 1u : 2u;
    }
  }
  __syncthreads();
  const int count = s_count;
  uint32_t pos[kSortPerThread], kind[kSortPerThread];
#pragma unroll
  for (int i = 0; i < kSortPerThread; ++i) {
    const int at = threadIdx.x * kSortPerThread + i;
    // Padding sorts last: stable, and after every real entry (positions < n <= 2^bits).
    pos[i] = at < count ? s.gather.pos[at] : ~0u;
    kind[i] = at < count ? s.gather.kind[at] : 0u;
  }
  __syncthreads();  // s.gather is the sort's storage next
  // Not ordered (TopkArgs::deterministic false): the entries stay in the order the gather's
  // atomics gave them, and so do the equal keys kept below.
  if (p.ordered) {
    const int bits = v.n > 1 ? 32 - __clz(static_cast<uint32_t>(v.n - 1)) : 1;
    BlockSort(s.sort).Sort(pos, kind, 0, bits);
    __syncthreads();
  }
  // Thread t holds sorted entries kSortPerThread t ..: equal ranks, then output places.
  int equal = 0;
#pragma unroll
  for (int i = 0; i < kSortPerThread; ++i) equal += kind[i] == 2u;
  int equal_before;
  BlockScan(s.scan).ExclusiveSum(equal, equal_before);
  __syncthreads();
  bool keep[kSortPerThread];
  int kept = 0;
#pragma unroll
  for (int i = 0; i < kSortPerThread; ++i) {
    keep[i] = kind[i] == 1u || (kind[i] == 2u && equal_before < remaining);
    equal_before += kind[i] == 2u;
    kept += keep[i];
  }
  int out;
  BlockScan(s.scan).ExclusiveSum(kept, out);
#pragma unroll
  for (int i = 0; i < kSortPerThread; ++i) {
    if (keep[i]) emit(p, v, out++, pos[i]);
  }
}

// Pass 3: each slice's kept keys in position order at its offset; rows of n <= k every position.
__global__ void __launch_bounds__(kThreads, 2) topk_emit(const __grid_constant__ MultiParams p) {
  __shared__ typename BlockScan::TempStorage s_scan;
  const RowView v = row_view(p);
  if (v.n <= p.k) {
    const int64_t stride = int64_t{p.slices} * kThreads;
    for (int64_t m = int64_t{v.slice} * kThreads + threadIdx.x; m < p.k; m += stride) {
      emit(p, v, m, m < v.n ? m : -1);
    }
    return;
  }
  if (p.state[v.r].fast != 0) {
    if (v.slice == 0) emit_sorted(p, v);
    return;
  }
  const TopkSlice sl = p.slice[v.r * p.slices + v.slice];
  if (sl.kept == 0) return;
  const uint32_t threshold = p.state[v.r].threshold;
  const int64_t begin = v.slice * p.slice_len;
  const int64_t end = min(begin + p.slice_len, v.n);
  int above_seen = 0;  // this slice's keys > T and == T in the tiles done
  int equal_seen = 0;
  uint32_t key[4];
  load_keys(v.row, begin + 4 * int64_t{threadIdx.x}, end, p.vec, key);
  for (int64_t base = begin; base < end; base += kTopkTile) {
    const int64_t j = base + 4 * int64_t{threadIdx.x};
    int above = 0, equal = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      above += j + e < end && key[e] > threshold;
      equal += j + e < end && key[e] == threshold;
    }
    // Both counts of a tile are at most kTopkTile < 2^16: one scan of (equal << 16 | above).
    int before, total;
    BlockScan(s_scan).ExclusiveSum(above | equal << 16, before, total);
    __syncthreads();  // s_scan is reused by the next tile
    // The next tile's keys load while this one's are written (zeros past the slice).
    uint32_t next[4];
    load_keys(v.row, j + kTopkTile, end, p.vec, next);
    int above_before = above_seen + (before & 0xffff);
    int equal_before = equal_seen + (before >> 16);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (j + e >= end) continue;
      if (key[e] > threshold) {
        emit(p, v, sl.offset + above_before + min(equal_before, sl.take_equal), j + e);
        ++above_before;
      } else if (key[e] == threshold) {
        if (equal_before < sl.take_equal)
          emit(p, v, sl.offset + above_before + equal_before, j + e);
        ++equal_before;
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) key[e] = next[e];
    above_seen += total & 0xffff;
    equal_seen += total >> 16;
    if (above_seen + min(equal_seen, sl.take_equal) == sl.kept) break;  // the same in every thread
  }
}

}  // namespace

Status topk_indices_multi(const TopkArgs& a, int64_t ld, Stream stream) {
  const int64_t rows = int64_t{a.batch} * a.next_n;
  const TopkMultiPlan plan = topk_multi_plan(rows, a.max_len, a.k);
  auto* ws = static_cast<char*>(a.workspace);
  MultiParams p;
  static_cast<TopkRows&>(p) = topk_rows(a, ld);
  p.slices = plan.slices;
  p.slice_len = plan.slice_len;
  p.vec = ld % 4 == 0 && reinterpret_cast<uintptr_t>(a.logits) % 16 == 0;
  p.keep_above = plan.keep_above;
  p.ordered = a.deterministic;
  p.cand_cap = plan.cand_cap;
  p.hist = reinterpret_cast<int32_t*>(ws);
  p.state = reinterpret_cast<TopkRowState*>(ws + plan.state_offset);
  p.slice = reinterpret_cast<TopkSlice*>(ws + plan.slice_offset);
  p.cand = reinterpret_cast<uint2*>(ws + plan.cand_offset);

  MLAKIT_CUDA_RETURN(cudaMemsetAsync(a.workspace, 0, plan.clear_bytes, stream));
  const auto blocks = static_cast<unsigned>(rows * plan.slices);
  topk_histogram<<<blocks, kThreads, 0, stream>>>(p);
  MLAKIT_CUDA_RETURN_LAUNCH("topk_histogram");
  topk_candidates<<<blocks, kThreads, 0, stream>>>(p);
  MLAKIT_CUDA_RETURN_LAUNCH("topk_candidates");
  topk_emit<<<blocks, kThreads, 0, stream>>>(p);
  MLAKIT_CUDA_RETURN_LAUNCH("topk_emit");
  return Status::Ok();
}

}  // namespace mlakit::ops
