// Top-k selection as sparse-decode indices: the cpu reference and the CUDA launcher, called by
// src/ops/ops.cc after validation. Both order values by the key below and keep ties by the lower
// position, so their results are equal bit for bit.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "mlakit/ops.h"
#include "ops/quant.h"

namespace mlakit::ops {

// A float's bits as an unsigned key in IEEE total order: -NaN < -inf < ... < -0 < +0 < ... <
// +inf < +NaN. Larger key = larger value.
MLAKIT_OPS_HD uint32_t order_key(float x) {
  const uint32_t b = bits_of(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The valid length of row t of a request of length `len` (the indexer's causal rule).
MLAKIT_OPS_HD int64_t topk_row_length(int64_t len, int32_t next_n, int32_t t) {
  const int64_t n = len - next_n + 1 + t;
  return n < 0 ? 0 : (n > len ? len : n);
}

// ---------------------------------------------------------------------------------------------
// The multi-block kernel's schedule and workspace (topk_multi.cu; ops.cc sizes and checks the
// workspace with the same plan). A row is cut into `slices` slices of `slice_len` positions, one
// block each; the blocks of all rows form a 1-D grid of rows * slices.
// ---------------------------------------------------------------------------------------------
inline constexpr int kTopkMultiThreads = 512;
inline constexpr int kTopkTile = kTopkMultiThreads * 4;  // positions a block reads at once (float4)
inline constexpr int kTopkTopBits = 12;                  // the first histogram's bits of a key
inline constexpr int kTopkTopBins = 1 << kTopkTopBits;
inline constexpr int kTopkCandidates = 8192;  // keys of the k-th largest's bin kept for refining
// A row's kept keys (above T, and equal to T) that its emit block sorts by position in one block
// radix sort (8 a thread): the sort path of topk_multi.cu, which also keeps the keys of the bins
// above the k-th largest's as candidates when k is below it and the slices are at least
// kTopkSortMinSlice long. The sort (about 6 us in one block) replaces the third read of each
// slice, which costs less on shorter slices (H100: 64 rows of 16K, slices of 2048, 29 -> 36 us
// with the sort; rows of 32K, slices of 4096, even; rows of 128K, slices of 16K, 107 -> 72 us).
inline constexpr int kTopkSortItems = kTopkMultiThreads * 8;
inline constexpr int64_t kTopkSortMinSlice = 8192;
inline constexpr int kTopkMaxSlices = 256;  // at most kTopkMultiThreads (one scan over them)
inline constexpr int64_t kTopkMinSlice = 2 * kTopkTile;
// Blocks to aim for over the grid (about 4 per SM of an H100/H200); below it rows are cut finer.
inline constexpr int64_t kTopkTargetBlocks = 512;
static_assert(kTopkMaxSlices <= kTopkMultiThreads, "the slices are scanned one a thread");
static_assert(kTopkTopBins % kTopkMultiThreads == 0, "the bin search gives each thread a run");

// Per row, cleared by the launcher before the first kernel.
struct TopkRowState {
  int32_t hist_done;   // blocks of the row past the histogram
  int32_t cand_done;   // blocks of the row past the candidate compaction
  int32_t cand_count;  // candidates compacted so far
  uint32_t bin;        // the top-bits bin of the k-th largest key
  int32_t bin_count;   // keys in that bin
  int32_t remaining;   // k minus the keys in higher bins; after the refine, keys == T to keep
  uint32_t threshold;  // the k-th largest key T
  int32_t fast;        // the refine found the sort path: the row's first emit block writes it
};

// Per slice of a row.
struct TopkSlice {
  int32_t above_bin;   // keys in bins above the k-th largest's (the compaction)
  int32_t offset;      // outputs of the row's earlier slices (the refine)
  int32_t take_equal;  // keys == T this slice keeps, its first ones in position order
  int32_t kept;        // outputs this slice writes
};

struct TopkMultiPlan {
  int64_t rows = 0;
  int32_t slices = 0;
  int64_t slice_len = 0;  // a multiple of kTopkTile
  // The sort path: the candidates also hold the keys of the bins above the k-th largest's (fewer
  // than k), for k < kTopkSortItems and slices of kTopkSortMinSlice and more.
  bool keep_above = false;
  // Candidates a row: the keys of the k-th largest's bin (up to kTopkCandidates), and k more on
  // the sort path.
  int32_t cand_cap = 0;
  // Byte offsets in the workspace, each 256-byte aligned: hist [rows, kTopkTopBins] int32, state
  // [rows] TopkRowState (these two cleared: clear_bytes), slice [rows, slices] TopkSlice,
  // candidates [rows, cand_cap] {key, position}.
  size_t state_offset = 0, slice_offset = 0, cand_offset = 0, clear_bytes = 0, bytes = 0;
};

inline bool topk_multi_applies(int64_t rows, int64_t max_len, int32_t k) {
  return rows > 0 && max_len >= kTopkMultiMinLen && max_len > k;
}

inline TopkMultiPlan topk_multi_plan(int64_t rows, int64_t max_len, int32_t k) {
  const auto round_up = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  TopkMultiPlan plan;
  plan.rows = rows;
  int64_t slices = (kTopkTargetBlocks + rows - 1) / rows;
  slices = std::min<int64_t>(slices, (max_len + kTopkMinSlice - 1) / kTopkMinSlice);
  slices = std::clamp<int64_t>(slices, 1, kTopkMaxSlices);
  plan.slice_len = round_up((max_len + slices - 1) / slices, kTopkTile);
  plan.slices = static_cast<int32_t>((max_len + plan.slice_len - 1) / plan.slice_len);
  plan.keep_above = k < kTopkSortItems && plan.slice_len >= kTopkSortMinSlice;
  plan.cand_cap = kTopkCandidates + (plan.keep_above ? k : 0);
  const auto r = static_cast<size_t>(rows);
  plan.state_offset = round_up(r * kTopkTopBins * sizeof(int32_t), 256);
  plan.clear_bytes = plan.state_offset + r * sizeof(TopkRowState);
  plan.slice_offset = round_up(plan.clear_bytes, 256);
  plan.cand_offset = round_up(plan.slice_offset + r * plan.slices * sizeof(TopkSlice), 256);
  plan.bytes = plan.cand_offset + r * static_cast<size_t>(plan.cand_cap) * 2 * sizeof(uint32_t);
  return plan;
}

// ---------------------------------------------------------------------------------------------
// The cluster kernel's schedule (topk_cluster.cu, sm_90): a row's `cluster` blocks (a thread-block
// cluster of up to kTopkClusterMax) each hold a slice of `slice_len` keys in shared memory; the
// row is read from global memory once. Rows up to kTopkClusterMax * kTopkClusterMaxSlice.
// ---------------------------------------------------------------------------------------------
inline constexpr int kTopkClusterThreads = 512;
inline constexpr int kTopkClusterMax = 8;               // the portable cluster size
inline constexpr int64_t kTopkClusterSlice = 16384;     // keys a block, preferred (64 KB)
inline constexpr int64_t kTopkClusterMaxSlice = 32768;  // keys a block, at most (128 KB)
// Slices are whole multiples of this (a ballot of 32 keys in each of the 16 warps' segments).
inline constexpr int64_t kTopkClusterGrain = kTopkClusterThreads;

struct TopkClusterPlan {
  int32_t cluster = 0;    // blocks a row; 0: the shapes do not take the cluster kernel
  int64_t slice_len = 0;  // a multiple of kTopkClusterGrain
  // The cluster kernel's waves of clusters for the rows on the device (topk_cluster_plan_here
  // asks the device's occupancy); 1 where not known.
  int32_t waves = 1;
};

// Blocks a row: enough for slices of kTopkClusterSlice keys, then more while the grid has fewer
// blocks than SMs (`sms`) and the slices stay at least 2 * kTopkTile long. Rows of max_len
// <= k need no selection (the other kernels write them); rows longer than kTopkClusterMax
// slices of kTopkClusterMaxSlice do not fit.
inline TopkClusterPlan topk_cluster_plan(int64_t rows, int64_t max_len, int32_t k, int sms) {
  TopkClusterPlan plan;
  if (rows <= 0 || max_len <= k) return plan;
  int64_t cluster = 1;
  while (cluster < kTopkClusterMax && cluster * kTopkClusterSlice < max_len) cluster *= 2;
  while (cluster < kTopkClusterMax && rows * cluster < sms && max_len >= cluster * 4 * kTopkTile) {
    cluster *= 2;
  }
  const int64_t slice = (max_len + cluster - 1) / cluster;
  plan.slice_len = (slice + kTopkClusterGrain - 1) / kTopkClusterGrain * kTopkClusterGrain;
  if (plan.slice_len > kTopkClusterMaxSlice) return {};
  plan.cluster = static_cast<int32_t>(cluster);
  return plan;
}

// Where both take the shapes, the cluster kernel over the multi-block one: up to 32 rows, or
// slices of 8K-16K keys (two blocks an SM) and at most 512 blocks (measured on an H200, k 2048,
// bench/results/2026-11-28-h100-h200-topk-cluster-indexer, call 6: faster there by 1.2-1.8x;
// slices of 4K, slices of 32K (one block an SM) and grids of more blocks were slower; 32 rows of
// 16K in slices of 4K: 15.2 against 22.8 us, bench/results/2026-11-28-h200-topk-stream; longer
// rows at 32 rows take the streaming kernel).
inline bool topk_cluster_preferred(int64_t rows, const TopkClusterPlan& plan) {
  return rows <= 32 ||
         (plan.slice_len >= 8192 && plan.slice_len <= 16384 && rows * plan.cluster <= 512);
}

// ---------------------------------------------------------------------------------------------
// The streaming cluster kernel's schedule (topk_stream.cu, sm_90): as the cluster kernel, a row's
// `cluster` blocks each take a slice, but a block streams its slice from global memory once and
// keeps only the candidates (keys at or above a bound from a sample of the row) in shared memory,
// kTopkStreamPool of them; two blocks an SM whatever the slice's length.
// ---------------------------------------------------------------------------------------------
inline constexpr int64_t kTopkStreamGrain = 2048;      // 16 warps' segments of whole float4s
inline constexpr int64_t kTopkStreamMaxSlice = 65536;  // slice positions fit 16 bits
inline constexpr int64_t kTopkStreamMinSlice = 8192;   // below it, fewer blocks a row
inline constexpr int kTopkStreamPool = 8192;           // candidates a block
inline constexpr int kTopkStreamBlocksPerSm = 2;       // the kernel's launch bounds
// Blocks a row at most: past the portable cluster size (8), as Hopper allows with the kernel's
// non-portable attribute; only batches of a few long rows take them.
inline constexpr int kTopkStreamClusterMax = 16;

// Clusters of each size (1 .. kTopkStreamClusterMax blocks) that run at once on the device: the
// streaming kernel's plan counts waves with them (at two blocks an SM an H200 runs 132 clusters of
// 2 at once but 30, not 33, of 8: a cluster's blocks must all sit in one GPC).
struct TopkWave {
  int32_t clusters[kTopkStreamClusterMax + 1] = {};  // [c]: clusters of c blocks; [0] unused
};

// The wave of a device that runs `blocks` blocks at once and any cluster shape that fits them (the
// plan's tests use it).
inline TopkWave topk_ideal_wave(int blocks) {
  TopkWave wave;
  for (int c = 1; c <= kTopkStreamClusterMax; ++c) wave.clusters[c] = blocks / c;
  return wave;
}

// A wave's fixed cost counted in keys a block streams: the sample, the selection and the writes
// take 9-13 us of a block's time at 1-64 rows (H200 traces), about what streaming 32K keys takes
// at two blocks an SM. A round figure, not tuned: it makes the plan prefer one wave of longer
// slices to two of shorter ones.
inline constexpr int64_t kTopkStreamWaveKeys = 32768;

// Blocks a row: the count c (1 .. kTopkStreamClusterMax) whose slices (max_len / c rounded up to
// kTopkStreamGrain, none empty, at most kTopkStreamMaxSlice and, past one block, at least
// kTopkStreamMinSlice) take the least time, counted as waves (rows over the clusters of c that
// run at once) times (slice + kTopkStreamWaveKeys); the fewer blocks on a tie. Not taken (cluster
// 0) for rows of max_len <= k (the other kernels write them), rows longer than
// kTopkStreamClusterMax slices, or where a block's expected candidates (about 1.5 k + 256 a row)
// exceed a third of its pool.
inline TopkClusterPlan topk_stream_plan(int64_t rows, int64_t max_len, int32_t k,
                                        const TopkWave& wave) {
  TopkClusterPlan plan;
  if (rows <= 0 || max_len <= k) return plan;
  int64_t best = 0;
  for (int64_t c = 1; c <= kTopkStreamClusterMax; ++c) {
    const int64_t slice = (max_len + c - 1) / c;
    const int64_t slice_len = (slice + kTopkStreamGrain - 1) / kTopkStreamGrain * kTopkStreamGrain;
    const int64_t expected = (int64_t{3} * k / 2 + 256 + c - 1) / c;
    if (slice_len > kTopkStreamMaxSlice || 3 * expected > kTopkStreamPool) continue;
    if (c > 1 && slice_len < kTopkStreamMinSlice) break;
    if ((c - 1) * slice_len >= max_len || wave.clusters[c] <= 0) continue;  // an empty block
    const int64_t waves = (rows + wave.clusters[c] - 1) / wave.clusters[c];
    const int64_t cost = waves * (slice_len + kTopkStreamWaveKeys);
    if (plan.cluster == 0 || cost < best) {
      best = cost;
      plan.cluster = static_cast<int32_t>(c);
      plan.slice_len = slice_len;
    }
  }
  return plan;
}

// The CUDA kernels, and the op's choice among them for a call's shapes (`multi`: a workspace is
// given and topk_multi_applies; `cluster`, `stream`: the plans on the device, cluster 0 where the
// kernel cannot run). The streaming kernel from 32 rows and 2^20 keys on (measured faster there
// by 1.1-2.4x, and slower below: H200, k 2048, bench/results/2026-11-28-h200-topk-stream), and
// wherever the cluster kernel's rows take more than one wave of its clusters (12-31 rows, H200:
// one wave, the cluster kernel 0.5-2.5 us faster; two waves, the streaming one 1.1-1.9x faster;
// bench/results/2026-11-28-h200-topk-indexer-logits, call 9); else as before: the cluster kernel
// where topk_cluster_preferred, the multi-block kernel with a workspace, one block a row.
enum class TopkKernel { kOneBlock, kMultiBlock, kCluster, kStream };

inline const char* topk_kernel_name(TopkKernel kernel) {
  switch (kernel) {
    case TopkKernel::kOneBlock: return "one-block";
    case TopkKernel::kMultiBlock: return "multi-block";
    case TopkKernel::kCluster: return "cluster";
    case TopkKernel::kStream: return "stream";
  }
  return "?";
}

inline constexpr int64_t kTopkStreamMinRows = 32;
inline constexpr int64_t kTopkStreamMinKeys = int64_t{1} << 20;  // rows * max_len

inline TopkKernel topk_choose(int64_t rows, int64_t max_len, bool multi,
                              const TopkClusterPlan& cluster, const TopkClusterPlan& stream) {
  if (stream.cluster > 0 && ((rows >= kTopkStreamMinRows && rows * max_len >= kTopkStreamMinKeys) ||
                             (cluster.cluster > 0 && cluster.waves > 1))) {
    return TopkKernel::kStream;
  }
  if (cluster.cluster > 0 && (!multi || topk_cluster_preferred(rows, cluster))) {
    return TopkKernel::kCluster;
  }
  if (multi) return TopkKernel::kMultiBlock;
  return TopkKernel::kOneBlock;
}

// The rows both CUDA kernels read and the outputs they write (kernel parameters): TopkArgs's
// device pointers and sizes, with the logits' row stride.
struct TopkRows {
  const float* logits;  // [b * next_n, ld]
  int64_t ld;
  const int32_t* seq_lens;     // [b]
  const int32_t* block_table;  // [b, block_table_stride]
  int64_t block_table_stride;
  int64_t max_len;
  int32_t next_n;
  int32_t k;
  int32_t page_size;
  int32_t* indices;    // [b * next_n, k]
  int32_t* positions;  // [b * next_n, k] or null
};

inline TopkRows topk_rows(const TopkArgs& a, int64_t ld) {
  return {.logits = a.logits,
          .ld = ld,
          .seq_lens = a.seq_lens,
          .block_table = a.block_table,
          .block_table_stride = a.block_table_stride,
          .max_len = a.max_len,
          .next_n = a.next_n,
          .k = a.k,
          .page_size = a.page_size,
          .indices = a.indices,
          .positions = a.positions};
}

// cpu reference: checks lengths and page ids first.
Status topk_indices_cpu(const TopkArgs& args, int64_t ld);
// CUDA (topk.cu): on sm_90 the cluster kernel where its plan takes the shapes and either no
// multi-block kernel can run (no workspace, or rows below kTopkMultiMinLen) or
// topk_cluster_preferred; else with a workspace and long rows the multi-block kernel; else one
// block a row. Each kernel can also be
// launched by itself (the tests run all three): topk_indices_one_block (topk.cu),
// topk_indices_multi (topk_multi.cu; needs the workspace), topk_indices_cluster (topk_cluster.cu;
// refuses shapes its plan does not take, and devices without clusters).
Status topk_indices_cuda(const TopkArgs& args, int64_t ld, Stream stream);
Status topk_indices_one_block(const TopkArgs& args, int64_t ld, Stream stream);
Status topk_indices_multi(const TopkArgs& args, int64_t ld, Stream stream);
Status topk_indices_cluster(const TopkArgs& args, int64_t ld, Stream stream);
// The cluster kernel with a plan that topk_cluster_plan_here gave (cluster > 0) for these args.
Status topk_launch_cluster(const TopkArgs& args, int64_t ld, const TopkClusterPlan& plan,
                           Stream stream);
// The streaming cluster kernel (topk_stream.cu): refuses shapes topk_stream_plan does not take
// and devices without clusters.
Status topk_indices_stream(const TopkArgs& args, int64_t ld, Stream stream);
Status topk_launch_stream(const TopkArgs& args, int64_t ld, const TopkClusterPlan& plan,
                          Stream stream);
// The streaming plan on the current device (cluster 0 where the kernel cannot run). Its cluster
// occupancy is asked once a device (also inside a stream capture, in relaxed mode) and kept.
Status topk_stream_plan_here(const TopkArgs& args, TopkClusterPlan* plan);
// Forgets the kept occupancy answers of both cluster kernels: the next plans ask the device
// again, as a process's first call does; and whether the streaming kernel's answer for `device`
// is kept (tests).
void topk_forget_occupancy();
void topk_cluster_forget_capacity();  // the cluster kernel's part of it
bool topk_stream_wave_known(int device);
// topk_choose on the current device for these args (with a workspace or not), and the plan of
// the cluster kernel it picks.
Status topk_choose_here(const TopkArgs& args, bool with_workspace, TopkKernel* kernel,
                        TopkClusterPlan* plan);
// The cluster plan on the current device (cluster 0 where it has no clusters or the build no
// sm_90 code for the kernel).
Status topk_cluster_plan_here(const TopkArgs& args, TopkClusterPlan* plan);

}  // namespace mlakit::ops
