// Registry entry of the sm80 backend: the portable tensor-core decode kernel (mma.sync, cp.async)
// with split-KV planned on the device and a combine kernel. Runs on sm_80 and newer.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>

#include "backends/sm80/launch.h"
#include "core/backend.h"
#include "core/check.h"

namespace mlakit {
namespace {

constexpr std::array<int32_t, 5> kPageSizes = {1, 16, 32, 64, 128};

class Sm80Backend final : public Backend {
 public:
  explicit Sm80Backend(const sm80::Setup& setup) : setup_(setup) {}
  std::string_view name() const override { return "sm80"; }
  size_t workspace_bytes() const override { return setup_.workspace_bytes; }
  Status run(const RunArgs& args, void* workspace, size_t, Stream stream) const override {
    return sm80::run(setup_, args, workspace, stream);
  }

 private:
  sm80::Setup setup_;
};

Status available(const DeviceInfo& device) {
  if (!device.present) return unsupported("no CUDA device (", device.error, ")");
  if (device.sm_major < 8) {
    return unsupported("backend sm80 needs compute capability 8.0 or newer; ", device.name,
                       " is sm_", device.sm_major, device.sm_minor);
  }
  return Status::Ok();
}

Status can_run(const Problem& problem, const DeviceInfo& device) {
  // Sparse: the dense kernels over the compacted slots as pages of one token (launch.h), so any
  // page size and s_q, every cache the dense kernels read, and the V3.2 and V4 layouts (widened on
  // their way into shared memory, loads_fp8.cuh; V4 with or without an extra cache).
  if (problem.has_extra() && problem.kv_layout != KvLayout::kFp8V4) {
    return unsupported("an extra cache (extra_topk ", problem.extra_topk, ") with kv_layout ",
                       to_string(problem.kv_layout),
                       " is not supported by backend sm80 (supported: with fp8_v4)");
  }
  const Problem p = sm80::planned_problem(problem);
  if (!problem.sparse() && p.kv_layout != KvLayout::kDense) {
    return unsupported("kv_layout ", to_string(p.kv_layout),
                       " without sparse attention is not supported by backend sm80 (supported: "
                       "dense; fp8_blockwise and fp8_v4 with topk > 0)");
  }
  // An fp8 cache computes in q's 16-bit type (or, with an fp8 q, the output's) and writes it.
  if (p.kv_dtype == DType::kFP8E4M3 && p.q_dtype != DType::kFP8E4M3 && p.out_dtype != p.q_dtype) {
    return unsupported("out_dtype ", to_string(p.out_dtype), " with q_dtype ", to_string(p.q_dtype),
                       " is not supported by backend sm80 (supported: out_dtype = q_dtype)");
  }
  if (std::find(kPageSizes.begin(), kPageSizes.end(), p.page_size) == kPageSizes.end()) {
    return unsupported("page_size ", p.page_size,
                       " is not supported by backend sm80 (supported: 1, 16, 32, 64, 128)");
  }
  const sm80::DecodeKernel& kernel = sm80::select_kernel(p, sm80::tile_for(p));
  int smem_optin = 0;
  if (cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device.device) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return unsupported("backend sm80 could not read the shared-memory limit of ", device.name);
  }
  if (sm80::stages_for(kernel, static_cast<size_t>(smem_optin)) == 0) {
    return unsupported("backend sm80 needs ",
                       kernel.smem_fixed_bytes + sm80::kMinStages * sm80::kStageBytes,
                       " bytes of shared memory per block for h_q * s_q = ", p.h_q * p.s_q, "; ",
                       device.name, " allows ", smem_optin);
  }
  return Status::Ok();
}

// Persistent is the default: on a skewed batch (64 requests, one 32x the rest) it was 5.9x faster
// than one-shot at h_q 128 and 3.6x at h_q 16, and on uniform batches (L 4096, batch 1, 8, 64)
// within 2% of one-shot at h_q 16 and at most 8% slower at h_q 128 (batch 1 and 8; H200,
// 2026-11). The tuner picks per bucket.
// Problems on 64-row tiles also get both schedules with the plain loop (config.h): where the
// score-warp / output-warp loop runs (sm_90) it is 16% faster at h_q 128 batch 64 and slower at
// small batches of h_q 64 (batch 1: 19.8 against 18.6 us; H200, 2026-11-24).
// Problems on 16- and 32-row tiles (h_q * s_q <= 32) get first, as their default, persistent with
// each CTA's part planned before griddepcontrol.wait and confirmed after it (tactic 4,
// "persistent-speculative", decode_kernel.cuh; up to 128 requests, beyond that it runs as 0): a
// CTA that reaches its SM while the previous kernel still runs no longer plans after the wait.
// Faster than 0 on every uniform case measured (h_q 16, L 4096; H100 b 1 12.2 -> 11.2 us, b 64
// 116.0 -> 114.5; H200 b 1 12.3 -> 11.4, b 64 84.3 -> 83.0; docs/sm80-decode.md item 27).
// With an fp8 cache the 64-row tile runs the plain loop only (tactics 0 and 1 are then plain).
std::vector<Tactic> tactics(const Problem& problem) {
  const Problem p = sm80::planned_problem(problem);
  if (sm80::tile_for(p) == sm80::TileKind::kM64 && p.kv_dtype == DType::kFP8E4M3) {
    return {{.id = 0, .name = "persistent"}, {.id = 1, .name = "one-shot"}};
  }
  if (sm80::tile_for(p) != sm80::TileKind::kM64) {
    return {{.id = 4, .name = "persistent-speculative"},
            {.id = 0, .name = "persistent"},
            {.id = 1, .name = "one-shot"}};
  }
  return {{.id = 0, .name = "persistent"},
          {.id = 1, .name = "one-shot"},
          {.id = 2, .name = "persistent-plain"},
          {.id = 3, .name = "one-shot-plain"}};
}

Status create(const Problem& problem, int tactic, const DeviceInfo& device,
              std::unique_ptr<Backend>* out) {
  sm80::Setup setup;
  MLAKIT_RETURN_IF_ERROR(sm80::make_setup(problem, tactic, device, &setup));
  *out = std::make_unique<Sm80Backend>(setup);
  return Status::Ok();
}

}  // namespace

const BackendEntry& sm80_backend_entry() {
  static const BackendEntry entry{
      .name = "sm80",
      .summary = "portable tensor-core decode (mma.sync, cp.async), split-KV planned on the device",
      .supports =
          "q/kv/out bf16 or fp16; fp8 e4m3 cache (one scale) with bf16/fp16 q (out alike) or "
          "e4m3 q (out bf16/fp16), widened to 16 bits in shared memory; page size 1, 16, 32, 64, "
          "128; h_q 1..128; s_q 1..16 causal or not; variable query lengths (var_q); variable "
          "lengths; sinks; lse; PDL; CUDA graphs; sparse top-k over dense caches and the V3.2 and "
          "V4 layouts (V4 with or without an extra cache; the slots as pages of one token). "
          "Tactics: "
          "persistent, one-shot (and both with the plain loop for h_q * s_q > "
          "32 and a 16-bit cache; persistent-speculative, the default for h_q * s_q <= 32)",
      .device_memory = true,
      .available = available,
      .can_run = can_run,
      .tactics = tactics,
      .create = create,
  };
  return entry;
}

}  // namespace mlakit
