// Host side of the sm90 backend (launch.h): setup at Decoder creation; tensor maps and launches at
// run.
#include "backends/sm90/launch.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <tuple>

#include "backends/sm90/config.h"
#include "backends/sm90/pack_q.h"
#include "core/check.h"
#include "core/cuda_check.h"
#include "core/views.h"
#include "kernels/common/combine.h"
#include "kernels/common/pdl.h"
#include "kernels/common/tensor_map.h"
#include "plan/compact.h"
#include "plan/cp_lengths.h"

namespace mlakit::sm90 {
namespace {

// Partition constants in blocks of 64 tokens (plan.h): a chunk's fixed cost (Q load, pipeline
// fill, the partial's write and combine read) is about 3 blocks, as for the sm80 64-row tile
// (6 of its 32-token blocks); the smallest chunk is one block.
constexpr int32_t kFixedCostBlocks = 3;
constexpr int32_t kMinChunkBlocks = 1;
// Cluster schedule: what the combine kernel costs a call, in blocks of one CTA's work (4-5 us
// against ~2.4 us a block; docs/sm90-decode.md).
constexpr int64_t kCombineCostBlocks = 2;
constexpr int64_t kMinCostedBlocks = 2;
// The sparse kernels' (tactics 12 and 13): a block takes ~3.7 us, so the combine is about one.
// Against 2 on an H200 (bench/results/2026-11-28-h200-sparse-mma-cluster, calls 8 and 9, topk
// 2048): tactic 12 at batch 8 4-6% faster at h_q 64 s_q 1 and 2 and h_q 128 s_q 1, batch 32 and 64
// within 0.6% (kMinCostedBlocks 1 as well changed nothing more); tactic 13 at h_q 8-32 batch 1
// 17.1-17.4 -> 12.2-12.9 us, batch 8 17.5-28.8 -> 13.2-28.8, batch 32 within 0.5%.
constexpr int64_t kSparseCombineCostBlocks = 1;

// The cluster schedule's shape for a call: C clusters of S CTAs per (request, tile), all in one
// wave (setup.cluster_ctas), at most one partial slot per request and cluster (slots), splits no
// more than the longest request's blocks. The cheapest by blocks per CTA (at least
// kMinCostedBlocks: with two stages a CTA's first two blocks load at once) plus the combine's
// cost when C > 1; among equal costs, C = 1 (no combine), then the fewest CTAs (fewer Q loads
// and partials), then the smallest S (a cluster merge through distributed shared memory cost
// more than the combine kernel's share at batch 1).
// (The CTAs that run at once are not monotonic in S: a cluster's CTAs share a GPC; on an H200 S
// 7 never fits better than 6 or 8.)
// Measured (H200, bench/results/2026-11-21-h200-cluster-shape): at batch 1 with every shape
// forced, h_q 16 L 4096 (64 blocks): (C, S) (8, 8) 13.0 us, (32, 1) 12.3, (64, 1) 12.2; L 8192:
// (8, 8) 15.6, (64, 1) 13.5; h_q 128 L 4096: (32, 2) 17.8, (32, 1) 16.4. Against the previous
// rule (C in {most, 1}, ties to larger S, no floor) over 84 cases of batch 1, 8, 32: geomean 1.034x
// faster, up to 1.34x (h_q 16 s_q 2 b 1 L 8192), worst 0.97x (h_q 64 b 1 L 32768).
ClusterShape cluster_shape(const Setup& setup, int32_t batch, int64_t slots) {
  const int64_t tiles = int64_t{batch} * setup.m_tiles;
  const int64_t max_blocks =
      std::max<int64_t>(1, plan::ceil_div<int64_t>(setup.planned.max_seq_len, kBlockN));
  ClusterShape best;
  int64_t best_cost = -1, best_ctas = 0;
  for (int32_t size = 1; size <= kMaxClusterCtas && size <= max_blocks; ++size) {
    const int64_t fit = setup.cluster_ctas[size] / (tiles * size);
    const int64_t most = std::min({fit, slots / batch, plan::ceil_div<int64_t>(max_blocks, size)});
    for (int64_t clusters = 1; clusters <= std::max<int64_t>(most, fit >= 1 ? 1 : 0); ++clusters) {
      const int64_t per_cta = plan::ceil_div(max_blocks, clusters * size);
      const int64_t combine =
          setup.split || setup.sparse_mma ? kSparseCombineCostBlocks : kCombineCostBlocks;
      const int64_t cost = std::max(per_cta, kMinCostedBlocks) + (clusters > 1 ? combine : 0);
      const int64_t ctas = clusters * size;
      const bool better = best_cost < 0 || cost < best_cost ||
                          (cost == best_cost &&
                           std::make_tuple(clusters > 1, ctas, size) <
                               std::make_tuple(best.clusters > 1, best_ctas, int64_t{best.size}));
      if (better) {
        best_cost = cost;
        best_ctas = ctas;
        best = {static_cast<int32_t>(clusters), size};
      }
    }
  }
  return best;
}

// A map over rows of `cols` (576, or V4's q 512) elements of `dtype`, boxes of 64 columns x
// box_rows rows in the swizzle of their 128 or 64 bytes, zeros outside (V4's q: its ninth column
// chunk is all zeros). 2-D: `rows` rows, `row_stride` elements apart (576 when
// dense; a view's, a multiple of 16 bytes, otherwise). 3-D (planes > 0): `planes` planes of `rows`
// rows, `plane_stride` elements apart (a cache's padded pages: rows = page_size), boxes of one
// plane. promotion: the L2 fetch size of the copies.
Status encode_rows(const void* base, DType dtype, uint64_t rows, int64_t row_stride,
                   uint64_t planes, int64_t plane_stride, uint32_t box_rows, const char* what,
                   CUtensorMapL2promotion promotion, CUtensorMap* map, int cols = kDqk) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  MLAKIT_RETURN_IF_ERROR(tensor_map_encoder(&encode));
  const bool fp8 = dtype == DType::kFP8E4M3;
  const cuuint32_t rank = planes > 0 ? 3 : 2;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(planes)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(row_stride) * dtype_bytes(dtype),
                                 static_cast<cuuint64_t>(plane_stride) * dtype_bytes(dtype)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(kChunkElems), box_rows, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encode(
      map, fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT16, rank,
      const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      fp8 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B, promotion,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return Status(StatusCode::kInternal, str_cat("backend sm90: cuTensorMapEncodeTiled failed for ",
                                                 what, " (CUresult ", static_cast<int>(r), ")"));
  }
  return Status::Ok();
}

// Bytes of one element of the cache's view (a blockwise cache's strides count bytes).
int64_t kv_elem_bytes(const Problem& p) {
  return p.kv_layout == KvLayout::kFp8Blockwise ? 1 : static_cast<int64_t>(dtype_bytes(p.kv_dtype));
}

// A TMA map's strides are below 2^40 bytes (validation bounds strides at 2^40 elements): the
// strides this run's maps take, checked with their names.
Status check_tma_strides(const Problem& p, const Views& v, bool pack_q, bool kv_paged) {
  constexpr int64_t kMaxBytes = (int64_t{1} << 40) - 16;
  const int64_t q_elem = static_cast<int64_t>(dtype_bytes(p.q_dtype)), kv_elem = kv_elem_bytes(p);
  struct Given {
    const char* name;
    int64_t stride, elem;
    bool used;
  };
  const Given given[] = {{"q_stride_h", v.q_h, q_elem, !pack_q},
                         {"kv_stride_token", v.kv_token, kv_elem, !p.sparse()},
                         {"kv_stride_page", v.kv_page, kv_elem, kv_paged}};
  for (const Given& g : given) {
    if (g.used && g.stride * g.elem > kMaxBytes) {
      return unsupported(g.name,
                         ": backend sm90 reads it by a TMA map whose strides are below 2^40 "
                         "bytes (at most ",
                         kMaxBytes / g.elem, " elements), given ", g.stride);
    }
  }
  return Status::Ok();
}

}  // namespace

namespace {

// The kernel of a 16-bit cache: dense (TMA pages), or sparse (a gather) of the 16-bit and V3.2
// caches or of the V4 cache.
const DecodeKernel& kernel_16bit(bool bf16, int32_t tile_rows, bool sparse, bool v4) {
  if (sparse && !v4) {
    switch (tile_rows) {
      case kRows: return bf16 ? decode_kernel_bf16_gather() : decode_kernel_fp16_gather();
      case kSmallNarrowRows:
        return bf16 ? decode_kernel_bf16_gather_narrow16() : decode_kernel_fp16_gather_narrow16();
      default:
        return bf16 ? decode_kernel_bf16_gather_narrow32() : decode_kernel_fp16_gather_narrow32();
    }
  }
  if (v4) {
    switch (tile_rows) {
      case kRows: return bf16 ? decode_kernel_bf16_v4() : decode_kernel_fp16_v4();
      case kSmallNarrowRows:
        return bf16 ? decode_kernel_bf16_v4_narrow16() : decode_kernel_fp16_v4_narrow16();
      default: return bf16 ? decode_kernel_bf16_v4_narrow32() : decode_kernel_fp16_v4_narrow32();
    }
  }
  switch (tile_rows) {
    case kRows: return bf16 ? decode_kernel_bf16() : decode_kernel_fp16();
    case kSmallNarrowRows:
      return bf16 ? decode_kernel_bf16_narrow16() : decode_kernel_fp16_narrow16();
    default: return bf16 ? decode_kernel_bf16_narrow32() : decode_kernel_fp16_narrow32();
  }
}

// The kernel of an e4m3 cache: narrow tiles of 16 or 32 rows, or the wide tile (an e4m3 q: fp8
// products; a 16-bit q: the cache widened in shared memory).
const DecodeKernel& kernel_e4m3(DType q, DType out, int32_t tile_rows) {
  const bool small = tile_rows == kSmallNarrowRows;
  if (tile_rows == kRows) {
    if (q == DType::kBF16) return decode_kernel_e4m3_bf16_wide();
    if (q == DType::kFP16) return decode_kernel_e4m3_fp16_wide();
    return out == DType::kBF16 ? decode_kernel_e4m3_e4m3_bf16() : decode_kernel_e4m3_e4m3_fp16();
  }
  if (q == DType::kFP8E4M3) {
    if (out == DType::kBF16) {
      return small ? decode_kernel_e4m3_e4m3_bf16_narrow16()
                   : decode_kernel_e4m3_e4m3_bf16_narrow32();
    }
    return small ? decode_kernel_e4m3_e4m3_fp16_narrow16()
                 : decode_kernel_e4m3_e4m3_fp16_narrow32();
  }
  if (q == DType::kBF16) {
    return small ? decode_kernel_e4m3_bf16_narrow16() : decode_kernel_e4m3_bf16_narrow32();
  }
  return small ? decode_kernel_e4m3_fp16_narrow16() : decode_kernel_e4m3_fp16_narrow32();
}

}  // namespace

Status prepare_kernel(const void* kernel, size_t smem_bytes) {
  MLAKIT_CUDA_RETURN(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_bytes)));
  cudaFuncAttributes attributes{};
  MLAKIT_CUDA_RETURN(cudaFuncGetAttributes(&attributes, kernel));
  if (attributes.binaryVersion != 90) {
    return unsupported(
        "backend sm90 needs the library built for sm_90a (CMAKE_CUDA_ARCHITECTURES "
        "with 90a); this build runs sm_",
        attributes.binaryVersion, " code on the device");
  }
  return Status::Ok();
}

Status count_active_clusters(const void* kernel, int threads, size_t smem_bytes, int cluster,
                             int* count) {
  cudaLaunchAttribute attribute[1] = {pdl::cluster_dimension(static_cast<unsigned>(cluster))};
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(cluster));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = smem_bytes;
  config.attrs = attribute;
  config.numAttrs = 1;
  MLAKIT_CUDA_RETURN(cudaOccupancyMaxActiveClusters(count, kernel, &config));
  return Status::Ok();
}

Status make_setup(const Problem& problem, int tactic, const DeviceInfo& device, Setup* setup) {
  const Problem p = plan::rows_as_requests(problem);
  const int32_t rows = p.h_q * p.s_q;
  // A sparse problem's cache is gathered into 16-bit stages (gather.cuh): q's type.
  const bool fp8 = p.kv_dtype == DType::kFP8E4M3 && !p.sparse();
  const bool split_cluster = tactic == kSplitClusterTactic;
  const bool mma_cluster = tactic == kSparseMmaClusterTactic;
  const bool sparse_mma =
      mma_cluster || (tactic >= kSparseMmaTactic && tactic < kSplitClusterTactic);
  if (sparse_mma && !sparse_mma_runs(p)) {
    return invalid_argument(
        "tactic",
        str_cat("0..", kSparseMmaTactic - 1,
                " (the sparse mma kernel runs sparse decode of the V3.2 cache with a bf16 q)"),
        tactic);
  }
  const bool sparse_narrow = tactic >= kSparseNarrowTactic && tactic < kSparseMmaTactic;
  if (sparse_narrow && !sparse_narrow_runs(p)) {
    return invalid_argument(
        "tactic",
        str_cat("0..", kSparseNarrowTactic - 1,
                " (the sparse narrow kernel runs sparse decode of the V3.2 cache with a bf16 or "
                "fp16 q and h_q up to ",
                kMaxNarrowRows, ")"),
        tactic);
  }
  const bool split = split_cluster || (tactic >= kSplitTactic && tactic < kSparseNarrowTactic);
  if (split && !split_kernel_runs(p)) {
    return invalid_argument("tactic",
                            str_cat("0..", kSplitTactic - 1,
                                    " (the split kernel runs sparse decode of the V3.2 cache with "
                                    "a bf16 or fp16 q)"),
                            tactic);
  }
  const bool q_split = tactic == kQSplitTactic || tactic == kQSplitTactic + 1;
  if (q_split && !q_split_runs(p)) {
    return invalid_argument(
        "tactic",
        "one of sm90's tactics for this problem (14 and 15, split q, run a dense problem with "
        "the fp8 e4m3 cache and a bf16 q)",
        tactic);
  }
  const bool q_split_narrow = tactic >= kQSplitNarrowTactic && tactic < kQSplitNarrowTactic + 3;
  if (q_split_narrow && !q_split_runs(p)) {
    return invalid_argument("tactic",
                            str_cat("one of sm90's tactics for this problem (", kQSplitNarrowTactic,
                                    "..", kQSplitNarrowTactic + 2,
                                    ", split q on the narrow tile, run a dense problem with the "
                                    "fp8 e4m3 cache and a bf16 q)"),
                            tactic);
  }
  const bool in_step = tactic >= kInStepTactic && tactic < kInStepTactic + 3;
  if (in_step && !in_step_runs(p)) {
    return invalid_argument(
        "tactic",
        str_cat("one of sm90's tactics for this problem (", kInStepTactic, "..", kInStepTactic + 2,
                ", the in-step tile, run a dense problem with the fp8 e4m3 "
                "cache and an e4m3 q)"),
        tactic);
  }
  const bool narrow = tactic >= kNarrowTactic && !split && !sparse_narrow && !sparse_mma &&
                      !q_split && !q_split_narrow && !in_step;
  if (narrow && !fp8 && rows > kMaxNarrowRows) {
    return invalid_argument("tactic",
                            str_cat("0..", kNarrowTactic - 1, " for h_q x s_q = ", rows,
                                    " (the narrow tile takes up to ", kMaxNarrowRows, " rows)"),
                            tactic);
  }
  const int32_t tile_rows = q_split_narrow                             ? kSmallNarrowRows
                            : !narrow && !sparse_narrow && !sparse_mma ? kRows
                            : rows <= kSmallNarrowRows || sparse_mma   ? kSmallNarrowRows
                                                                       : kMaxNarrowRows;
  const bool bf16 = p.q_dtype == DType::kBF16;
  const DecodeKernel& kernel =
      mma_cluster  ? decode_kernel_bf16_smma_cluster()
      : sparse_mma ? decode_kernel_bf16_smma()
      : sparse_narrow
          ? (tile_rows == kSmallNarrowRows
                 ? (bf16 ? decode_kernel_bf16_snarrow16() : decode_kernel_fp16_snarrow16())
                 : (bf16 ? decode_kernel_bf16_snarrow32() : decode_kernel_fp16_snarrow32()))
      : split_cluster
          ? (bf16 ? decode_kernel_bf16_sv32_cluster() : decode_kernel_fp16_sv32_cluster())
      : split          ? (bf16 ? decode_kernel_bf16_sv32() : decode_kernel_fp16_sv32())
      : q_split        ? decode_kernel_e4m3_bf16_qsplit()
      : q_split_narrow ? decode_kernel_e4m3_bf16_qsplit_narrow16()
      : in_step        ? (p.out_dtype == DType::kBF16 ? decode_kernel_e4m3_e4m3_bf16_instep()
                                                      : decode_kernel_e4m3_e4m3_fp16_instep())
      : fp8            ? kernel_e4m3(p.q_dtype, p.out_dtype, tile_rows)
                       : kernel_16bit(bf16, tile_rows, p.sparse(),
                                      p.sparse() && p.kv_layout == KvLayout::kFp8V4);
  MLAKIT_RETURN_IF_ERROR(kernel.prepare());
  const int32_t m_tiles = plan::ceil_div(rows, tile_rows);
  setup->problem = problem;
  setup->planned = p;
  setup->kernel = &kernel;
  setup->tile_rows = tile_rows;
  setup->split = split;
  setup->sparse_mma = sparse_mma;
  setup->sparse_copies = sparse_mma || sparse_narrow;
  setup->q_split = q_split;
  setup->m_tiles = m_tiles;
  const int schedule_id = mma_cluster      ? 2
                          : sparse_mma     ? tactic - kSparseMmaTactic
                          : sparse_narrow  ? tactic - kSparseNarrowTactic
                          : split_cluster  ? 2
                          : split          ? tactic - kSplitTactic
                          : q_split        ? tactic - kQSplitTactic
                          : q_split_narrow ? tactic - kQSplitNarrowTactic
                          : in_step        ? tactic - kInStepTactic
                                           : tactic % kNarrowTactic;
  const plan::Schedule schedule = schedule_id == 1   ? plan::Schedule::kOneShot
                                  : schedule_id == 2 ? plan::Schedule::kCluster
                                                     : plan::Schedule::kPersistent;
  if (schedule == plan::Schedule::kCluster) {
    setup->cluster_ctas[1] = device.sm_count;
    for (int k = 2; k <= kMaxClusterCtas; ++k) {
      int clusters = 0;
      MLAKIT_RETURN_IF_ERROR(kernel.max_active_clusters(k, &clusters));
      setup->cluster_ctas[k] = clusters * k;
    }
  }
  // One CTA per SM and query tile.
  setup->shape = plan::make_plan_shape(p, schedule, kBlockN, kFixedCostBlocks, kMinChunkBlocks,
                                       device.sm_count / m_tiles);
  setup->layout = plan::workspace_layout(setup->shape);
  setup->compact_offset = (setup->layout.bytes + 255) / 256 * 256;
  // The region at compact_offset: a sparse problem's compacted slots, or the lengths of a
  // context-parallel rank or a var_q problem (cp_lengths.h).
  setup->q_pack_offset =
      p.sparse() ? setup->compact_offset +
                       (plan::compact_bytes(p.max_batch, p.topk + p.extra_topk) + 255) / 256 * 256
                 : setup->compact_offset + plan::cp_lengths_bytes(problem);
  // Room for q packed (pack_q.h) whatever the run's views: any run may pass one.
  // A split q: its two e4m3 parts take a 16-bit q's bytes, then a float a row (split_q_bytes).
  setup->workspace_bytes = setup->q_pack_offset + (q_split ? split_q_bytes(p) : packed_q_bytes(p));
  setup->inline_plan = plan::plans_in_kernel(setup->shape);
  setup->pdl = p.enable_pdl;
  setup->sm_count = device.sm_count;
  return Status::Ok();
}

Status run(const Setup& setup, const RunArgs& args, void* workspace, cudaStream_t stream) {
  const Problem& p = setup.problem;
  const bool sparse = p.sparse();
  // Sparse: the rows (request, query token) run as requests of one query token.
  RunArgs a = args;
  a.batch = sparse ? args.batch * p.s_q : args.batch;
  const plan::PlanShape& shape = setup.shape;
  // TMA reads rows by 32-bit coordinates from 16-byte aligned bases.
  const int64_t kv_rows = a.num_pages * p.page_size;
  if (a.num_pages < 1 || kv_rows > INT32_MAX) {
    return invalid_argument(
        "num_pages",
        str_cat("1..", INT32_MAX / p.page_size, " for backend sm90 (page_size ", p.page_size, ")"),
        a.num_pages);
  }
  const int64_t q_count = int64_t{a.batch} * shape.rows;  // q's rows
  if (q_count > INT32_MAX) {
    return invalid_argument(
        "batch", str_cat("at most ", INT32_MAX / (int64_t{p.h_q} * p.s_q), " for backend sm90"),
        args.batch);
  }
  if (reinterpret_cast<uintptr_t>(a.q) % 16 != 0 || reinterpret_cast<uintptr_t>(a.kv_cache) % 16) {
    return invalid_argument(
        "q, kv_cache", "16-byte aligned addresses for backend sm90",
        reinterpret_cast<uintptr_t>(a.q) % 16 != 0 ? "q misaligned" : "kv_cache misaligned");
  }
  // Views. TMA reads q's rows by one row stride (else, and always with var_q, q is packed into
  // the workspace first, pack_q.h), and a dense problem's cache by tokens (2-D) or, with padded
  // pages, by (token, page) (3-D); the sparse gather and the epilogues address every row by its
  // strides.
  const Views views = views_of(p, a);
  // var_q reads q where it lies when its token rows are equally spaced and every query tile of a
  // request is wholly live or wholly past q_len (h_q a multiple of the tile's rows: the live rows,
  // q_len h_q, then end at a tile's edge), so that no tile reads past a request's rows, which
  // for the last request would be past q's end (issue_q). Else q is packed first: at h_q 128, s_q 4
  // the copy took 6.6-7.9 us at batch 8 (ncu), and var_q with every q_len s_q took 4-6% longer
  // than the padded problem at batch 128 with it, within 2% without (H200,
  // bench/results/2026-11-28-h200-varq-inplace).
  // A split q is always packed by the split (below).
  const bool q_in_place = !setup.q_split && p.var_q && views.q_s == int64_t{p.h_q} * views.q_h &&
                          p.h_q % setup.tile_rows == 0;
  const bool pack_q = !setup.q_split && !views.q_uniform(p) && !q_in_place;
  const bool kv_paged = !sparse && !views.kv_uniform(p);
  // The sparse gather reads slot s at s * the token stride (gather.cuh). Padded pages (FlashMLA's
  // own tests pad each page by a token) are read through slots that the compaction spaces by the
  // page pitch in tokens: the page stride must be a whole number of token strides. The V4 gather
  // finds a slot's page and token by a shift: its slots are spaced by the page size's next power
  // of two, every one (with an extra cache, tagged by plan::kExtraSlot) below 2^30.
  const bool v4 = sparse && p.kv_layout == KvLayout::kFp8V4;
  int32_t sparse_page_pitch = p.page_size, extra_page_pitch = 0;
  if (v4) {
    MLAKIT_RETURN_IF_ERROR(
        plan::v4_page_pitches(p, a, "sm90", &sparse_page_pitch, &extra_page_pitch));
  } else if (sparse && !views.kv_uniform(p)) {
    sparse_page_pitch = plan::padded_page_pitch(views.kv_page, views.kv_token, a.num_pages);
    if (sparse_page_pitch == 0) {
      return unsupported(
          "kv_stride_page: backend sm90 gathers a sparse problem's tokens from a cache whose "
          "page stride is a whole number of token strides (",
          views.kv_token, " elements) with num_pages * that number of tokens below 2^31, given ",
          views.kv_page, " for ", a.num_pages,
          " pages (other padded pages run on the sm80 and cpu backends)");
    }
  }
  MLAKIT_RETURN_IF_ERROR(check_tma_strides(p, views, pack_q || setup.q_split, kv_paged));
  const bool one_shot = shape.schedule == plan::Schedule::kOneShot;
  const bool cluster = shape.schedule == plan::Schedule::kCluster;
  int32_t max_splits = one_shot ? plan::one_shot_max_splits(shape, a.batch) : 0;
  ClusterShape cs;
  if (cluster) {
    cs = setup.forced_cluster_shape.size > 0
             ? setup.forced_cluster_shape
             : cluster_shape(setup, a.batch, setup.layout.max_slots);
    max_splits = cs.clusters * cs.size;
  }
  plan::PlanView view = plan::plan_view(shape, setup.layout, workspace, max_splits);
  view.cluster_size = cs.size;
  DecodeParams params{};
  static_cast<plan::DecodeParamsBase&>(params) =
      plan::decode_params_base(setup.planned, p, a, shape, view, setup.inline_plan);
  params.kv_cache = static_cast<const uint8_t*>(a.kv_cache);
  params.kv_view = plan::kv_view(p, views, kv_elem_bytes(p));
  if (sparse) {
    // Slots are token strides apart, padded pages included (the compaction's page pitch).
    params.kv_view.stride_page = params.kv_view.stride_token;
    params.kv_view.slot_page_size = 0;
    if (setup.sparse_copies && params.kv_view.stride_token > int64_t{UINT32_MAX}) {
      return unsupported("kv_stride_token: sm90's sparse mma and narrow kernels gather tokens ",
                         "with a token stride below 2^32 bytes, given ",
                         params.kv_view.stride_token, " bytes");
    }
  }
  params.kv_paged = kv_paged ? 1 : 0;
  params.q_in_place = q_in_place ? 1 : 0;
  params.fill = Fill::kPages;
  params.direct_s_q = 0;
  params.direct_tokens = INT32_MAX;
  params.direct_page_size = params.direct_page_pitch = 1;
  // The split and sparse mma kernels' cluster schedule reads the indices as given (each checked on
  // the device, padded pages read by their pitch): one index list, every query token its own row of
  // indices (no var_q packing). No compaction kernel runs.
  const bool direct =
      sparse && (setup.split || setup.sparse_mma) && cluster && !p.has_extra() && !p.var_q;
  if (direct) {
    params.block_table = args.indices;
    params.block_table_stride = p.topk;
    params.seq_lens = args.topk_lens;  // per request; null: topk each
    params.max_len = p.topk;
    params.direct_s_q = p.s_q;
    params.direct_tokens = static_cast<int32_t>(kv_rows);
    params.direct_page_size = p.page_size;
    params.direct_page_pitch = sparse_page_pitch;
    params.fill = Fill::kGatherV32;
  } else if (sparse) {
    plan::CompactParams compact =
        plan::compact_params(p, args, static_cast<uint8_t*>(workspace) + setup.compact_offset);
    compact.main.page_pitch = sparse_page_pitch;
    if (p.has_extra()) compact.extra.page_pitch = extra_page_pitch;
    MLAKIT_RETURN_IF_ERROR(plan::launch_compact(compact, a.batch, stream, setup.pdl));
    params.block_table = compact.slots;
    params.block_table_stride = p.topk + p.extra_topk;
    params.seq_lens = compact.counts;
    params.max_len = p.topk + p.extra_topk;
    params.fill = v4                                       ? Fill::kGatherV4
                  : p.kv_layout == KvLayout::kFp8Blockwise ? Fill::kGatherV32
                                                           : Fill::kGather16;
    if (v4) {
      params.v4[0] = plan::v4_cache(a.kv_cache, p.page_size, sparse_page_pitch);
      params.v4[1] =
          p.has_extra()
              ? plan::v4_cache(a.extra_kv_cache, p.extra_page_size_or_default(), extra_page_pitch)
              : params.v4[0];
    }
  } else if (p.context_parallel() || p.var_q) {
    // The rank's lengths and causal bounds, counted from the global lengths, or var_q's bounds
    // from each request's query length (cp_lengths.h).
    const plan::CpLengthsParams cp =
        plan::cp_lengths_params(p, args, static_cast<uint8_t*>(workspace) + setup.compact_offset);
    MLAKIT_RETURN_IF_ERROR(plan::launch_cp_lengths(cp, stream, setup.pdl));
    params.seq_lens = cp.local_lens;
    params.causal_bounds = cp.causal_bounds;
  }
  const void* q_rows = a.q;
  int64_t q_row_stride = views.q_h;
  if (pack_q) {
    const PackQParams pack{
        .q = static_cast<const uint8_t*>(a.q),
        .packed = static_cast<uint8_t*>(workspace) + setup.q_pack_offset,
        .view = plan::row_view(p, views.q_b, views.q_s, views.q_h, args.cu_seqlens_q),
        .requests = a.batch,
        .rows = shape.rows,
        .row_bytes = static_cast<int32_t>(p.d_qk * dtype_bytes(p.q_dtype)),
        .elem_bytes = static_cast<int32_t>(dtype_bytes(p.q_dtype))};
    MLAKIT_RETURN_IF_ERROR(launch_pack_q(pack, setup.sm_count, stream, setup.pdl));
    q_rows = pack.packed;
    q_row_stride = p.d_qk;
  }
  uint32_t q_cols = static_cast<uint32_t>(p.d_qk);
  DType q_map_dtype = p.q_dtype;
  if (setup.q_split) {
    // q split into two e4m3 parts per row, [rows, 2 d_qk] bytes, and each row's 2^-k.
    uint8_t* const packed = static_cast<uint8_t*>(workspace) + setup.q_pack_offset;
    const SplitQParams sq{
        .q = static_cast<const uint8_t*>(a.q),
        .packed = packed,
        .row_scale = reinterpret_cast<float*>(packed + split_q_scales_offset(setup.planned)),
        .view = plan::row_view(p, views.q_b, views.q_s, views.q_h, args.cu_seqlens_q),
        .requests = a.batch,
        .rows = shape.rows};
    MLAKIT_RETURN_IF_ERROR(launch_split_q(sq, setup.sm_count, stream, setup.pdl));
    q_rows = packed;
    q_row_stride = 2 * p.d_qk;
    q_cols = static_cast<uint32_t>(2 * p.d_qk);
    q_map_dtype = DType::kFP8E4M3;
    params.q_row_scale = sq.row_scale;
  }
  if (!setup.inline_plan && !cluster) {
    MLAKIT_RETURN_IF_ERROR(plan::launch_plan(shape, view, params.seq_lens, a.batch, params.max_len,
                                             stream, setup.pdl));
  }
  // L2 promotion: 256 bytes for the wide tile, none for the narrow one. One call (H200,
  // 2026-11-21), wide / narrow tile, 256 B against none: h_q 16 b 128 L 8192 narrow 304 -> 280 us,
  // b 64 L 8192 161 -> 153, b 64 L 4096 87.9 -> 86.0 (128 B as none); wide h_q 128 s_q 2 b 32
  // L 8192 (cluster) 253 -> 271, other wide cases within 1%.
  const CUtensorMapL2promotion promotion = setup.tile_rows == kRows
                                               ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B
                                               : CU_TENSOR_MAP_L2_PROMOTION_NONE;
  MLAKIT_RETURN_IF_ERROR(encode_rows(q_rows, q_map_dtype, std::max<int64_t>(q_count, 1),
                                     q_row_stride, 0, 0, static_cast<uint32_t>(setup.tile_rows),
                                     "q", promotion, &params.q_map, q_cols));
  const auto kv_box = static_cast<uint32_t>(std::min(p.page_size, kBlockN));
  if (sparse) {
    params.kv_map = params.q_map;  // not read: the producer gathers (prefetched all the same)
  } else if (kv_paged) {
    MLAKIT_RETURN_IF_ERROR(encode_rows(a.kv_cache, p.kv_dtype, p.page_size, views.kv_token,
                                       a.num_pages, views.kv_page, kv_box, "kv_cache", promotion,
                                       &params.kv_map));
  } else {
    MLAKIT_RETURN_IF_ERROR(encode_rows(a.kv_cache, p.kv_dtype, kv_rows, views.kv_token, 0, 0,
                                       kv_box, "kv_cache", promotion, &params.kv_map));
  }
  const int64_t ctas =
      int64_t{one_shot || cluster ? max_splits * a.batch : shape.num_parts} * setup.m_tiles;
  MLAKIT_RETURN_IF_ERROR(
      setup.kernel->launch(params, dim3(static_cast<unsigned>(ctas)), cs.size, stream, setup.pdl));
  // The cluster schedule with one cluster per request and tile merges and writes everything.
  if (cluster && cs.clusters == 1) return Status::Ok();
  return launch_combine(params, p.out_dtype, setup.sm_count, stream, setup.pdl);
}

}  // namespace mlakit::sm90
