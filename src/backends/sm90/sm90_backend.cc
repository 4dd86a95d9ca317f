// Registry entry of the sm90 backend: the Hopper decode kernel (wgmma, TMA, mbarriers, a producer
// warp and two consumer warpgroups) with the shared split-KV plan and combine kernel.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>

#include "backends/sm90/launch.h"
#include "core/backend.h"
#include "core/check.h"

namespace mlakit {
namespace {

constexpr std::array<int32_t, 3> kPageSizes = {32, 64, 128};
constexpr int32_t kMaxSq = 8;

class Sm90Backend final : public Backend {
 public:
  explicit Sm90Backend(const sm90::Setup& setup) : setup_(setup) {}
  std::string_view name() const override { return "sm90"; }
  size_t workspace_bytes() const override { return setup_.layout.bytes; }
  Status run(const RunArgs& args, void* workspace, size_t, Stream stream) const override {
    return sm90::run(setup_, args, workspace, stream);
  }

 private:
  sm90::Setup setup_;
};

Status available(const DeviceInfo& device) {
  if (!device.present) return unsupported("no CUDA device (", device.error, ")");
  if (device.sm_major != 9) {
    return unsupported("backend sm90 needs compute capability 9.0 (wgmma, TMA); ", device.name,
                       " is sm_", device.sm_major, device.sm_minor);
  }
  return Status::Ok();
}

Status can_run(const Problem& p, const DeviceInfo&) {
  if (p.kv_dtype != DType::kBF16 && p.kv_dtype != DType::kFP16) {
    return unsupported("kv_dtype ", to_string(p.kv_dtype),
                       " is not supported by backend sm90 (supported: bf16, fp16)");
  }
  if (p.sparse()) {
    return unsupported("sparse attention (topk ", p.topk,
                       ") is not supported by backend sm90 (supported: dense)");
  }
  if (p.s_q > kMaxSq) {
    return unsupported("s_q ", p.s_q, " is not supported by backend sm90 (supported: 1..", kMaxSq,
                       ")");
  }
  if (std::find(kPageSizes.begin(), kPageSizes.end(), p.page_size) == kPageSizes.end()) {
    return unsupported("page_size ", p.page_size,
                       " is not supported by backend sm90 (supported: 32, 64, 128; sm80 runs 1 "
                       "and 16)");
  }
  return Status::Ok();
}

// Up to 16 query rows the 64-row wgmma tile computes 4x the rows it needs; sm80's 16-row tile
// ran faster there (tune/tuner.cc, heuristic).
bool defers(const Problem& p, const DeviceInfo&) { return p.h_q * p.s_q <= 16; }

// The first is the default (untuned calls): over the reference grid on an H200 cluster was
// within 1.3% of the fastest tactic (geometric mean, worst row 1.12x), persistent 5.3% (worst
// 1.43x), one-shot 9.8% (bench/results/2026-11-21-h200-cluster-two-level).
std::vector<Tactic> tactics(const Problem&) {
  return {
      {.id = 2, .name = "cluster"}, {.id = 0, .name = "persistent"}, {.id = 1, .name = "one-shot"}};
}

Status create(const Problem& problem, int tactic, const DeviceInfo& device,
              std::unique_ptr<Backend>* out) {
  sm90::Setup setup;
  MLAKIT_RETURN_IF_ERROR(sm90::make_setup(problem, tactic, device, &setup));
  *out = std::make_unique<Sm90Backend>(setup);
  return Status::Ok();
}

}  // namespace

const BackendEntry& sm90_backend_entry() {
  static const BackendEntry entry{
      .name = "sm90",
      .summary = "Hopper decode (wgmma, TMA, warp-specialized), split-KV planned on the device",
      .supports =
          "sm_90 only; q/kv/out bf16 or fp16; page size 32, 64, 128; h_q 1..128; s_q "
          "1..8 causal or not; variable lengths; sinks; lse; PDL; CUDA graphs. Tactics: "
          "persistent, one-shot, cluster",
      .device_memory = true,
      .available = available,
      .can_run = can_run,
      .tactics = tactics,
      .create = create,
      .defers = defers,
  };
  return entry;
}

}  // namespace mlakit
