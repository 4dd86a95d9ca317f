// Host side of the sm80 backend: the table of kernel instantiations, the setup fixed at Decoder
// creation (tile, plan shape, workspace layout) and the three launches of one run: plan, decode,
// combine.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/sm80/config.h"
#include "backends/sm80/params.h"
#include "mlakit/mlakit.h"
#include "plan/plan.h"

namespace mlakit::sm80 {

// One explicit instantiation of the decode kernel (dtype x tile config).
struct DecodeKernel {
  int rows;                 // query rows per CTA
  size_t smem_fixed_bytes;  // dynamic shared memory per CTA beyond the KV stages
  // Sets the kernel's shared-memory limit for `stages` KV stages; reports the occupancy.
  Status (*prepare)(int stages, int* ctas_per_sm);
  Status (*launch)(const DecodeParams& params, dim3 grid, cudaStream_t stream, bool pdl);
};

// Defined in decode_<dtype>_<tile>.cu.
const DecodeKernel& decode_kernel_bf16_m16();
const DecodeKernel& decode_kernel_bf16_m32();
const DecodeKernel& decode_kernel_bf16_m64();
const DecodeKernel& decode_kernel_fp16_m16();
const DecodeKernel& decode_kernel_fp16_m32();
const DecodeKernel& decode_kernel_fp16_m64();
const DecodeKernel& decode_kernel_bf16_m64_roles();
const DecodeKernel& decode_kernel_fp16_m64_roles();
// Defined in decode_e4m3_<dtype>_<tile>.cu: an e4m3 cache widened to <dtype> (loads_fp8.cuh).
const DecodeKernel& decode_kernel_e4m3_bf16_m16();
const DecodeKernel& decode_kernel_e4m3_bf16_m32();
const DecodeKernel& decode_kernel_e4m3_bf16_m64();
const DecodeKernel& decode_kernel_e4m3_fp16_m16();
const DecodeKernel& decode_kernel_e4m3_fp16_m32();
const DecodeKernel& decode_kernel_e4m3_fp16_m64();
// Defined in decode_v32_<dtype>_<tile>.cu: the V3.2 blockwise cache (sparse) widened to <dtype>.
const DecodeKernel& decode_kernel_v32_bf16_m16();
const DecodeKernel& decode_kernel_v32_bf16_m32();
const DecodeKernel& decode_kernel_v32_bf16_m64();
const DecodeKernel& decode_kernel_v32_fp16_m16();
const DecodeKernel& decode_kernel_v32_fp16_m32();
const DecodeKernel& decode_kernel_v32_fp16_m64();
// Defined in decode_v4_<dtype>_<tile>.cu: the V4 cache (sparse) widened to <dtype>.
const DecodeKernel& decode_kernel_v4_bf16_m16();
const DecodeKernel& decode_kernel_v4_bf16_m32();
const DecodeKernel& decode_kernel_v4_bf16_m64();
const DecodeKernel& decode_kernel_v4_fp16_m16();
const DecodeKernel& decode_kernel_v4_fp16_m32();
const DecodeKernel& decode_kernel_v4_fp16_m64();

// The 16-bit type the kernel computes in: the cache's; for an fp8 cache q's, or with an fp8 q
// the output's.
DType compute_dtype(const Problem& problem);

// The tile config for a problem: the smallest tile that holds all query rows of a request
// (16 or 32 rows), else 64-row tiles.
TileKind tile_for(const Problem& problem);
// The tile's kernel for the problem's dtypes with the smallest shared memory (what can_run
// checks); make_setup takes the 64-row tile's kRoles kernel instead where kMinRolesStages of it
// fit (16-bit caches only).
const DecodeKernel& select_kernel(const Problem& problem, TileKind tile);

// KV stages for `kernel` within `smem_optin` bytes per block (the most, up to kMaxStages); 0 when
// not even kMinStages fit.
int stages_for(const DecodeKernel& kernel, size_t smem_optin);

struct Setup {
  Problem problem;
  // What the plan and kernel see: the problem, or a sparse one's rows as requests of one query
  // token over pages of one token, the compacted slots (plan/compact.h).
  Problem planned;
  const DecodeKernel* kernel = nullptr;
  int32_t m_tiles = 1;  // query tiles per request
  int32_t stages = kMinStages;
  bool roles = false;  // the 64-row tile's score-warp / output-warp loop (config.h, kRoles)
  plan::PlanShape shape;
  plan::WorkspaceLayout layout;
  size_t compact_offset = 0;   // sparse: the compacted slots and counts in the workspace
  size_t workspace_bytes = 0;  // layout.bytes, and the compacted slots when sparse
  bool inline_plan = false;    // persistent: the decode kernel plans, no plan kernel (launch.cc)
  bool speculate = false;      // tactic 4: each CTA plans its part before griddepcontrol.wait
  bool pdl = false;            // programmatic dependent launch (enable_pdl on sm_90+)
  int32_t sm_count = 1;        // sizes the combine kernel's grid
};

// smem_limit: when nonzero, the shared memory per block to plan for instead of the device's
// (tests run the kernels sm_80 gets, 163 KB, on larger devices).
struct SetupOptions {
  size_t smem_limit = 0;
};

// A sparse problem as the sm80 kernels run it: plan::rows_as_requests over pages of one token
// (the compacted slots are its page ids). Other problems unchanged.
Problem planned_problem(const Problem& problem);

// Prepares the kernel (shared-memory limit, occupancy) and sizes plan and workspace for the
// device's SM count. tactic: 0 persistent, 1 one-shot; 2 and 3 the same with the 64-row tile's
// plain loop; 4 persistent with the part planned before griddepcontrol.wait (sm80_backend.cc).
Status make_setup(const Problem& problem, int tactic, const DeviceInfo& device, Setup* setup,
                  const SetupOptions& options = {});

// The three launches of a run, as bits of `launches` in run(): all of them for a call; one alone
// to time it apart (the decode kernel alone reads the plan that an earlier run of the same
// lengths left in the workspace, the combine kernel alone that run's partials).
enum Launches : unsigned {
  kLaunchPlan = 1,
  kLaunchDecode = 2,
  kLaunchCombine = 4,
  kLaunchAll = 7,
};

// Plan, decode and combine on `stream`. Host work only; nothing is read from device memory.
Status run(const Setup& setup, const RunArgs& args, void* workspace, cudaStream_t stream,
           unsigned launches = kLaunchAll);

}  // namespace mlakit::sm80
