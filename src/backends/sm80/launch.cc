// Host side of the sm80 backend (launch.h): setup at Decoder creation, launches at run.
#include "backends/sm80/launch.h"

#include <algorithm>
#include <bit>

#include "core/check.h"
#include "core/cuda_check.h"
#include "core/views.h"
#include "kernels/common/combine.h"
#include "plan/compact.h"
#include "plan/cp_lengths.h"

namespace mlakit::sm80 {
namespace {

// Partition constants, in blocks of kBlockN tokens. fixed_cost_blocks: what one more chunk costs
// beyond its tokens (the Q load, pipeline fill, the partial's write and its combine read);
// min_chunk_blocks: the smallest part worth a CTA. Measured on an H200 (2026-11), whole call:
//  - 16 rows: fixed 8 instead of 3 took batch 1, L 4096 from 24 to 20 us (fewer partials to
//    combine) and changed batch 64 / 128 and a skewed batch by 1-4%.
//  - 64 rows: fixed 6; 12 was 9% slower on a skewed batch.
//  - min_chunk 2 rather than 4: batch 1, L 4096, one-shot, h_q 16 13.7 us instead of 16.0, h_q
//    128 24.1 instead of 27.0 (more CTAs for a lone request); 8 cost 5 to 9 us there; batch 8
//    and 64 do not reach the minimum.
//  - 32 rows: in between, not tuned.
struct PartitionConstants {
  int32_t fixed_cost_blocks;
  int32_t min_chunk_blocks;
};

PartitionConstants partition_constants(TileKind tile) {
  switch (tile) {
    case TileKind::kM16: return {.fixed_cost_blocks = 8, .min_chunk_blocks = 2};
    case TileKind::kM32: return {.fixed_cost_blocks = 4, .min_chunk_blocks = 2};
    case TileKind::kM64: return {.fixed_cost_blocks = 6, .min_chunk_blocks = 2};
  }
  return {.fixed_cost_blocks = 6, .min_chunk_blocks = 2};
}

// Shared memory for one of `ctas` CTAs per SM (at most `limit` when nonzero).
Status smem_per_cta(const DeviceInfo& device, int ctas, size_t limit, size_t* bytes) {
  int optin = 0, per_sm = 0, reserved = 0;
  MLAKIT_CUDA_RETURN(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device.device));
  MLAKIT_CUDA_RETURN(
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device.device));
  MLAKIT_CUDA_RETURN(
      cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device.device));
  *bytes = std::min<size_t>(optin, per_sm / ctas - reserved);
  if (limit != 0) *bytes = std::min(*bytes, limit);
  return Status::Ok();
}

}  // namespace

TileKind tile_for(const Problem& problem) {
  const int32_t rows = problem.h_q * problem.s_q;
  if (rows <= TileM16::kRows) return TileKind::kM16;
  if (rows <= TileM32::kRows) return TileKind::kM32;
  return TileKind::kM64;
}

DType compute_dtype(const Problem& p) {
  if (p.kv_dtype != DType::kFP8E4M3) return p.kv_dtype;
  return p.q_dtype == DType::kFP8E4M3 ? p.out_dtype : p.q_dtype;
}

const DecodeKernel& select_kernel(const Problem& p, TileKind tile) {
  const bool bf16 = compute_dtype(p) == DType::kBF16;
  if (p.kv_layout == KvLayout::kFp8V4) {
    switch (tile) {
      case TileKind::kM16: return bf16 ? decode_kernel_v4_bf16_m16() : decode_kernel_v4_fp16_m16();
      case TileKind::kM32: return bf16 ? decode_kernel_v4_bf16_m32() : decode_kernel_v4_fp16_m32();
      case TileKind::kM64: return bf16 ? decode_kernel_v4_bf16_m64() : decode_kernel_v4_fp16_m64();
    }
  }
  if (p.kv_layout == KvLayout::kFp8Blockwise) {
    switch (tile) {
      case TileKind::kM16:
        return bf16 ? decode_kernel_v32_bf16_m16() : decode_kernel_v32_fp16_m16();
      case TileKind::kM32:
        return bf16 ? decode_kernel_v32_bf16_m32() : decode_kernel_v32_fp16_m32();
      case TileKind::kM64:
        return bf16 ? decode_kernel_v32_bf16_m64() : decode_kernel_v32_fp16_m64();
    }
  }
  if (p.kv_dtype == DType::kFP8E4M3) {
    switch (tile) {
      case TileKind::kM16:
        return bf16 ? decode_kernel_e4m3_bf16_m16() : decode_kernel_e4m3_fp16_m16();
      case TileKind::kM32:
        return bf16 ? decode_kernel_e4m3_bf16_m32() : decode_kernel_e4m3_fp16_m32();
      case TileKind::kM64:
        return bf16 ? decode_kernel_e4m3_bf16_m64() : decode_kernel_e4m3_fp16_m64();
    }
  }
  switch (tile) {
    case TileKind::kM16: return bf16 ? decode_kernel_bf16_m16() : decode_kernel_fp16_m16();
    case TileKind::kM32: return bf16 ? decode_kernel_bf16_m32() : decode_kernel_fp16_m32();
    case TileKind::kM64: return bf16 ? decode_kernel_bf16_m64() : decode_kernel_fp16_m64();
  }
  return decode_kernel_bf16_m64();
}

int stages_for(const DecodeKernel& kernel, size_t smem_optin) {
  if (smem_optin < kernel.smem_fixed_bytes) return 0;
  const size_t stages = (smem_optin - kernel.smem_fixed_bytes) / kStageBytes;
  return stages < kMinStages ? 0 : static_cast<int>(std::min<size_t>(stages, kMaxStages));
}

Problem planned_problem(const Problem& problem) {
  Problem d = plan::rows_as_requests(problem);
  if (problem.sparse()) d.page_size = 1;
  return d;
}

Status make_setup(const Problem& problem, int tactic, const DeviceInfo& device, Setup* setup,
                  const SetupOptions& options) {
  const Problem p = planned_problem(problem);
  const TileKind tile = tile_for(p);
  const DecodeKernel* kernel = &select_kernel(p, tile);
  // The 16-row tile runs two CTAs per SM where each still gets kMinStages (sm_90: 2 stages each
  // instead of one CTA of 5): its 4 warps leave the SM idle on their own latencies. h_q 16,
  // L 4096, whole call, persistent: batch 64 87.0 us instead of 101.3, batch 8 22.8 instead of
  // 26.0 (H200, 2026-11). Larger tiles, and devices where two do not fit, take the deepest
  // pipeline one CTA allows.
  // The 64-row tile runs the score-warp / output-warp loop (config.h, kRoles) where that fits
  // kMinRolesStages (sm_90: 4 stages). h_q 128, batch 64, L 4096: 282 us against 337 for the
  // plain loop when it came (H200, 2026-11-24, docs/sm80-decode.md item 21); 226-229 since item
  // 23, which wants 4 stages (decode_roles.cuh).
  // With 2 stages (sm_80's 163 KB) a tile's copy would be issued just before the score warps need
  // it, so the plain loop runs there.
  size_t smem = 0;
  int stages = 0;
  bool roles = false;
  if (tile == TileKind::kM16) {
    MLAKIT_RETURN_IF_ERROR(smem_per_cta(device, 2, options.smem_limit, &smem));
    stages = stages_for(*kernel, smem);
  }
  if (stages == 0) {
    MLAKIT_RETURN_IF_ERROR(smem_per_cta(device, 1, options.smem_limit, &smem));
    if (tile == TileKind::kM64 && tactic < 2 && p.kv_dtype != DType::kFP8E4M3) {
      const DecodeKernel& roles_kernel = p.kv_dtype == DType::kBF16
                                             ? decode_kernel_bf16_m64_roles()
                                             : decode_kernel_fp16_m64_roles();
      if (stages_for(roles_kernel, smem) >= kMinRolesStages) {
        kernel = &roles_kernel;
        roles = true;
      }
    }
    stages = stages_for(*kernel, smem);
  }
  int ctas_per_sm = 0;
  if (stages > 0) MLAKIT_RETURN_IF_ERROR(kernel->prepare(stages, &ctas_per_sm));
  if (ctas_per_sm < 1) {
    return unsupported("the sm80 decode kernel (", kernel->smem_fixed_bytes, " + ", kMinStages,
                       " x ", kStageBytes, " bytes of shared memory per CTA) does not fit on ",
                       device.name);
  }
  const int32_t rows = p.h_q * p.s_q;
  const int32_t m_tiles = plan::ceil_div(rows, kernel->rows);
  const PartitionConstants constants = partition_constants(tile);
  setup->problem = problem;
  setup->planned = p;
  setup->kernel = kernel;
  setup->m_tiles = m_tiles;
  setup->stages = stages;
  setup->roles = roles;
  setup->shape = plan::make_plan_shape(
      p, tactic % 2 == 1 ? plan::Schedule::kOneShot : plan::Schedule::kPersistent, kBlockN,
      constants.fixed_cost_blocks, constants.min_chunk_blocks,
      int64_t{device.sm_count} * ctas_per_sm / m_tiles);
  setup->layout = plan::workspace_layout(setup->shape);
  setup->compact_offset = (setup->layout.bytes + 255) / 256 * 256;
  // The region at compact_offset: a sparse problem's compacted slots, or the lengths of a
  // context-parallel rank or a var_q problem (cp_lengths.h).
  const size_t lengths_bytes = plan::cp_lengths_bytes(problem);
  setup->workspace_bytes =
      p.sparse() ? setup->compact_offset +
                       plan::compact_bytes(p.max_batch, problem.topk + problem.extra_topk)
      : lengths_bytes > 0 ? setup->compact_offset + lengths_bytes
                          : setup->layout.bytes;
  setup->inline_plan = plan::plans_in_kernel(setup->shape);
  setup->speculate = tactic == 4 && !roles;
  setup->pdl = p.enable_pdl && device.sm_major >= 9;
  setup->sm_count = device.sm_count;
  return Status::Ok();
}

Status run(const Setup& setup, const RunArgs& args, void* workspace, cudaStream_t stream,
           unsigned launches) {
  const Problem& p = setup.problem;
  const bool sparse = p.sparse();
  // Sparse: the rows (request, query token) run as requests of one query token (Setup::planned).
  RunArgs a = args;
  a.batch = sparse ? args.batch * p.s_q : args.batch;
  const plan::PlanShape& shape = setup.shape;
  const bool one_shot = shape.schedule == plan::Schedule::kOneShot;
  const int32_t max_splits = one_shot ? plan::one_shot_max_splits(shape, a.batch) : 0;
  const plan::PlanView view = plan::plan_view(shape, setup.layout, workspace, max_splits);
  DecodeParams params{};
  static_cast<plan::DecodeParamsBase&>(params) =
      plan::decode_params_base(setup.planned, p, a, shape, view, setup.inline_plan);
  // Views: the loads, the epilogue and the combine address every row of q, the cache and out by
  // its strides (contiguous tensors are the views with the dense strides).
  const Views views = views_of(p, args);
  params.q = a.q;
  params.kv = a.kv_cache;
  params.q_view = plan::row_view(p, views.q_b, views.q_s, views.q_h, args.cu_seqlens_q);
  params.kv_view = plan::kv_view(p, views, 1);
  params.stages = setup.stages;
  params.scale = a.softmax_scale;
  params.speculate = setup.speculate;
  params.q_fp8 = p.q_dtype == DType::kFP8E4M3;
  params.q_chunks = p.d_qk / 8;  // of a 16-bit q (V4: 64, the rest zeros)
  if (sparse) {
    // The compacted slots are the rows' page ids (pages of one token): never out of range. V4:
    // (cache, page, token) at the pitches of plan::v4_page_pitches (plan::V4Cache).
    plan::CompactParams compact =
        plan::compact_params(p, args, static_cast<uint8_t*>(workspace) + setup.compact_offset);
    if (p.kv_layout == KvLayout::kFp8V4) {
      int32_t main_pitch = 0, extra_pitch = 0;
      MLAKIT_RETURN_IF_ERROR(plan::v4_page_pitches(p, args, "sm80", &main_pitch, &extra_pitch));
      compact.main.page_pitch = main_pitch;
      if (p.has_extra()) compact.extra.page_pitch = extra_pitch;
      params.v4[0] = plan::v4_cache(args.kv_cache, p.page_size, main_pitch);
      params.v4[1] = p.has_extra() ? plan::v4_cache(args.extra_kv_cache,
                                                    p.extra_page_size_or_default(), extra_pitch)
                                   : params.v4[0];
    }
    if (launches & kLaunchPlan) {
      MLAKIT_RETURN_IF_ERROR(plan::launch_compact(compact, a.batch, stream, setup.pdl));
    }
    params.block_table = compact.slots;
    params.block_table_stride = p.topk + p.extra_topk;
    params.seq_lens = compact.counts;
    params.max_len = p.topk + p.extra_topk;
    params.num_pages = static_cast<int32_t>(std::min<int64_t>(compact.main.num_tokens, INT32_MAX));
  } else if (p.context_parallel() || p.var_q) {
    // The rank's lengths and causal bounds, counted from the global lengths, or var_q's bounds
    // from each request's query length (cp_lengths.h).
    const plan::CpLengthsParams cp =
        plan::cp_lengths_params(p, args, static_cast<uint8_t*>(workspace) + setup.compact_offset);
    if (launches & kLaunchPlan) {
      MLAKIT_RETURN_IF_ERROR(plan::launch_cp_lengths(cp, stream, setup.pdl));
    }
    params.seq_lens = cp.local_lens;
    params.causal_bounds = cp.causal_bounds;
  }
  if ((launches & kLaunchPlan) && !setup.inline_plan) {
    MLAKIT_RETURN_IF_ERROR(plan::launch_plan(shape, view, params.seq_lens, a.batch, params.max_len,
                                             stream, setup.pdl));
  }
  if (launches & kLaunchDecode) {
    const int64_t ctas = int64_t{one_shot ? max_splits * a.batch : shape.num_parts} * setup.m_tiles;
    const dim3 grid(static_cast<unsigned>(ctas));
    MLAKIT_RETURN_IF_ERROR(setup.kernel->launch(params, grid, stream, setup.pdl));
  }
  if (launches & kLaunchCombine) {
    MLAKIT_RETURN_IF_ERROR(launch_combine(params, p.out_dtype, setup.sm_count, stream, setup.pdl));
  }
  return Status::Ok();
}

}  // namespace mlakit::sm80
