// Host side of the sm90 backend: the kernel instantiations, the setup fixed at Decoder creation
// (plan shape, workspace layout) and the launches of one run: plan (when not inline), decode,
// combine. The plan and combine machinery is the sm80 backend's (src/plan, kernels/common).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/sm90/config.h"
#include "backends/sm90/params.h"
#include "mlakit/mlakit.h"
#include "plan/plan.h"

namespace mlakit::sm90 {

// One explicit instantiation of the decode kernel (per dtype and tile rows).
struct DecodeKernel {
  // Sets the shared-memory limit; fails when the build has no sm_90a code for the kernel.
  Status (*prepare)();
  // cluster: CTAs per cluster (1: none).
  Status (*launch)(const DecodeParams& params, dim3 grid, int cluster, cudaStream_t stream,
                   bool pdl);
  // Clusters of `cluster` CTAs the device runs at once (after prepare).
  Status (*max_active_clusters)(int cluster, int* count);
};

// Sets a decode kernel's dynamic shared-memory limit; fails, naming the build, when the library
// has no sm_90a code for it (a DecodeKernel's prepare).
Status prepare_kernel(const void* kernel, size_t smem_bytes);

// How many clusters of `cluster` CTAs of `kernel` (`threads` threads, `smem_bytes` of dynamic
// shared memory; prepared) the device runs at once: a cluster's CTAs share a GPC, so this can be
// less than the SMs / cluster (a DecodeKernel's max_active_clusters).
Status count_active_clusters(const void* kernel, int threads, size_t smem_bytes, int cluster,
                             int* count);

// Defined in decode_<dtype>.cu (the wide tile of 64 rows) and decode_<dtype>_narrow<rows>.cu.
const DecodeKernel& decode_kernel_bf16();
const DecodeKernel& decode_kernel_fp16();
const DecodeKernel& decode_kernel_bf16_narrow16();
const DecodeKernel& decode_kernel_bf16_narrow32();
const DecodeKernel& decode_kernel_fp16_narrow16();
const DecodeKernel& decode_kernel_fp16_narrow32();
// Defined in decode_<dtype>_gather[_narrow<rows>].cu: sparse decode of the 16-bit and V3.2 caches
// on these tiles (the gather and the V3.2 widening compiled only there, Widen::kGather).
const DecodeKernel& decode_kernel_bf16_gather();
const DecodeKernel& decode_kernel_bf16_gather_narrow16();
const DecodeKernel& decode_kernel_bf16_gather_narrow32();
const DecodeKernel& decode_kernel_fp16_gather();
const DecodeKernel& decode_kernel_fp16_gather_narrow16();
const DecodeKernel& decode_kernel_fp16_gather_narrow32();
// Defined in decode_<dtype>_v4[_narrow<rows>].cu: sparse decode of the V4 cache (its gather and
// widening compiled only there, gather.cuh).
const DecodeKernel& decode_kernel_bf16_v4();
const DecodeKernel& decode_kernel_bf16_v4_narrow16();
const DecodeKernel& decode_kernel_bf16_v4_narrow32();
const DecodeKernel& decode_kernel_fp16_v4();
const DecodeKernel& decode_kernel_fp16_v4_narrow16();
const DecodeKernel& decode_kernel_fp16_v4_narrow32();
// Defined in decode_e4m3_<q>[_<out>]_narrow<rows>.cu: an e4m3 cache (decode_fp8_narrow.cuh) with a
// bf16 or fp16 q (out alike) or an e4m3 q (out bf16 or fp16).
const DecodeKernel& decode_kernel_e4m3_bf16_narrow16();
const DecodeKernel& decode_kernel_e4m3_bf16_narrow32();
const DecodeKernel& decode_kernel_e4m3_fp16_narrow16();
const DecodeKernel& decode_kernel_e4m3_fp16_narrow32();
const DecodeKernel& decode_kernel_e4m3_e4m3_bf16_narrow16();
const DecodeKernel& decode_kernel_e4m3_e4m3_bf16_narrow32();
const DecodeKernel& decode_kernel_e4m3_e4m3_fp16_narrow16();
const DecodeKernel& decode_kernel_e4m3_e4m3_fp16_narrow32();
// Defined in decode_<q>_fp8w.cu: the e4m3 cache with a 16-bit q on the wide tile, widened in
// shared memory (Widen::kFp8, decode_kernel.cuh).
const DecodeKernel& decode_kernel_e4m3_bf16_wide();
const DecodeKernel& decode_kernel_e4m3_fp16_wide();
// Defined in decode_bf16_qsplit.cu: the e4m3 cache with a bf16 q split into two e4m3 parts on the
// e4m3 wide tile (Widen::kQSplit).
const DecodeKernel& decode_kernel_e4m3_bf16_qsplit();
// Defined in decode_bf16_qsplit_narrow16.cu: the same split, made by the consumers, on the fp8
// narrow tile of 16 rows (decode_fp8_narrow.cuh).
const DecodeKernel& decode_kernel_e4m3_bf16_qsplit_narrow16();
// Defined in decode_<q>_sv32.cu: the split sparse kernel of the V3.2 cache (decode_sparse_v32.cuh).
const DecodeKernel& decode_kernel_bf16_sv32();
const DecodeKernel& decode_kernel_fp16_sv32();
// Defined in decode_<q>_sv32c.cu: the same kernel under the cluster schedule (kSplitClusterTactic).
const DecodeKernel& decode_kernel_bf16_sv32_cluster();
const DecodeKernel& decode_kernel_fp16_sv32_cluster();
// Defined in decode_<q>_snarrow<rows>.cu: the sparse narrow kernel of the V3.2 cache
// (decode_sparse_narrow.cuh).
const DecodeKernel& decode_kernel_bf16_snarrow16();
const DecodeKernel& decode_kernel_bf16_snarrow32();
const DecodeKernel& decode_kernel_fp16_snarrow16();
const DecodeKernel& decode_kernel_fp16_snarrow32();
// Defined in decode_bf16_smma.cu: the sparse mma kernel of the V3.2 cache (decode_sparse_mma.cuh);
// in decode_bf16_smmac.cu, the same under the cluster schedule (kSparseMmaClusterTactic).
const DecodeKernel& decode_kernel_bf16_smma();
const DecodeKernel& decode_kernel_bf16_smma_cluster();
// Defined in decode_e4m3_e4m3_<out>.cu: an e4m3 cache and q on the wide tile (decode_fp8_wide.cuh).
const DecodeKernel& decode_kernel_e4m3_e4m3_bf16();
const DecodeKernel& decode_kernel_e4m3_e4m3_fp16();
// Defined in decode_e4m3_e4m3_<out>_instep.cu: the same problems on the in-step wide tile
// (Widen::kInStep, decode_fp8_instep.cuh).
const DecodeKernel& decode_kernel_e4m3_e4m3_bf16_instep();
const DecodeKernel& decode_kernel_e4m3_e4m3_fp16_instep();

// Tactics: 0 persistent, 1 one-shot, 2 cluster (plan.h: C clusters of S CTAs per request and query
// tile, each cluster merging through distributed shared memory, the combine kernel only when
// C > 1; the shape picked per call from the batch); kNarrowTactic + each of them with the narrow
// tile (config.h; h_q x s_q <= 32 only, except with an fp8 cache: there the narrow tile runs
// tiles of 32 rows beyond that).
inline constexpr int kNarrowTactic = 3;
// kSplitTactic + 0 (persistent) and + 1 (one-shot): sparse decode of the V3.2 cache with a 16-bit q
// on the split kernel (decode_sparse_v32.cuh), 64-row tiles.
inline constexpr int kSplitTactic = 6;
// Whether the split kernel takes the problem (its tactics are listed and accepted).
inline bool split_kernel_runs(const Problem& p) {
  return p.sparse() && p.kv_layout == KvLayout::kFp8Blockwise &&
         (p.q_dtype == DType::kBF16 || p.q_dtype == DType::kFP16);
}
inline constexpr int kMaxNarrowRows = 32;
// The narrow tile's two sizes: 16 rows up to this many, else kMaxNarrowRows.
inline constexpr int kSmallNarrowRows = 16;
// kSparseNarrowTactic + 0 (persistent) and + 1 (one-shot): sparse decode of the V3.2 cache with a
// 16-bit q on the sparse narrow kernel (decode_sparse_narrow.cuh), tiles of 16 or 32 rows, up to
// kMaxNarrowRows rows (h_q x s_q as requests: h_q).
inline constexpr int kSparseNarrowTactic = 8;
inline bool sparse_narrow_runs(const Problem& p) {
  return split_kernel_runs(p) && p.h_q <= kMaxNarrowRows;
}
// kSparseMmaTactic + 0 (persistent) and + 1 (one-shot): sparse decode of the V3.2 cache with a
// bf16 q on the sparse mma kernel (decode_sparse_mma.cuh), in tiles of 16 rows (past 16 each
// tile gathers every token: the split kernel's one gather wins from a few requests on).
inline constexpr int kSparseMmaTactic = 10;
inline bool sparse_mma_runs(const Problem& p) {
  return split_kernel_runs(p) && p.q_dtype == DType::kBF16;
}
// The split kernel's cluster schedule (after the ids above): clusters of S CTAs per request merge
// through distributed shared memory, so no plan kernel runs and, with one cluster per request, no
// combine kernel.
inline constexpr int kSplitClusterTactic = 12;
// The sparse mma kernel's cluster schedule (the same, for the tiles of 16 rows; a bf16 q).
inline constexpr int kSparseMmaClusterTactic = 13;

// kQSplitTactic + 0 (persistent) and + 1 (one-shot): the one-scale e4m3 cache with a bf16 q on
// the e4m3 wide tile, q split into two e4m3 parts (Widen::kQSplit, decode_fp8_wide.cuh). Not
// fp16: its 11 significant bits do not fit two e4m3 parts.
inline constexpr int kQSplitTactic = 14;
inline bool q_split_runs(const Problem& p) {
  return !p.sparse() && p.kv_dtype == DType::kFP8E4M3 && p.q_dtype == DType::kBF16;
}
// kQSplitNarrowTactic + 0 (persistent), + 1 (one-shot) and + 2 (cluster): the same problems on the
// fp8 narrow tile in tiles of 16 rows, q split by the consumers as each chunk's Q lands (no split
// kernel before the decode; q read as the 16-bit narrow tile reads it).
inline constexpr int kQSplitNarrowTactic = 16;
// kInStepTactic + 0 (persistent), + 1 (one-shot) and + 2 (cluster): a dense problem with the fp8
// e4m3 cache and an e4m3 q on the in-step wide tile (decode_fp8_instep.cuh), tiles of 64 rows.
inline constexpr int kInStepTactic = 19;
inline bool in_step_runs(const Problem& p) {
  return !p.sparse() && p.kv_dtype == DType::kFP8E4M3 && p.q_dtype == DType::kFP8E4M3;
}

// The cluster schedule's shape of one call (plan.h): C clusters of S CTAs per (request, tile).
struct ClusterShape {
  int32_t clusters = 1;  // C
  int32_t size = 1;      // S
};

struct Setup {
  Problem problem;
  // What the plan and the kernel see: the problem, or a sparse one's rows as requests of one
  // query token whose tokens are their compacted slots (plan::rows_as_requests).
  Problem planned;
  const DecodeKernel* kernel = nullptr;
  int32_t tile_rows = kRows;  // 64, or 16 / 32 for the narrow tile
  int32_t m_tiles = 1;        // query tiles per request
  plan::PlanShape shape;
  plan::WorkspaceLayout layout;
  size_t compact_offset = 0;   // sparse: the compacted slots and counts in the workspace
  size_t q_pack_offset = 0;    // q packed, when a run's q rows are not equally spaced (pack_q.h)
  size_t workspace_bytes = 0;  // layout.bytes, the compacted slots when sparse, the packed q
  bool inline_plan = false;    // persistent: the decode kernel plans, no plan kernel
  bool split = false;          // the split sparse kernel (kSplitTactic)
  bool sparse_mma = false;     // the sparse mma kernel (kSparseMmaTactic)
  // The sparse mma or narrow kernel: their producers copy tokens with 32-bit slot x stride
  // arithmetic (produce_sparse_narrow), so run() refuses token strides of 2^32 bytes or more.
  bool sparse_copies = false;
  bool q_split = false;  // a 16-bit q split into two e4m3 parts (kQSplitTactic)
  bool pdl = false;
  int32_t sm_count = 1;
  // Cluster schedule: CTAs the device runs at once in clusters of k CTAs (k = 1..8; a cluster's
  // CTAs share a GPC, so fewer than the SMs for most k).
  int32_t cluster_ctas[kMaxClusterCtas + 1] = {};
  // Tests only: this shape for every call instead of the one picked from the batch (size 0: none).
  // C x batch must stay within layout.max_slots.
  ClusterShape forced_cluster_shape{.clusters = 0, .size = 0};
};

// tactic: above (kNarrowTactic).
Status make_setup(const Problem& problem, int tactic, const DeviceInfo& device, Setup* setup);

// Plan, decode and combine on `stream`. Host work only (the tensor maps are encoded here).
Status run(const Setup& setup, const RunArgs& args, void* workspace, cudaStream_t stream);

}  // namespace mlakit::sm90
