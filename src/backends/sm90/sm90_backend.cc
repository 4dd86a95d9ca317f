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

// The first is the default (untuned calls). Over the reference grid on an H200 the cluster tactic
// was within 1.3% of the fastest (geometric mean, worst row 1.12x), persistent 5.3% (worst 1.43x),
// one-shot 9.8% (bench/results/2026-11-21-h200-cluster-two-level). Up to 16 query rows the narrow
// tile's cluster tactic was within 0.6% of the fastest tactic of either backend (worst 1.08x) over
// the 17 cases of h_q 16, s_q 1, against 7.0% for the wide cluster tactic and 7.5% for sm80's
// persistent one; at 17..32 rows (h_q 16, s_q 2) the wide cluster tactic stays first (2.1%,
// narrow cluster 6.5%) (bench/results/2026-11-21-h200-narrow).
std::vector<Tactic> tactics(const Problem& p) {
  const Tactic cluster = {.id = 2, .name = "cluster"}, persistent = {.id = 0, .name = "persistent"},
               one_shot = {.id = 1, .name = "one-shot"};
  const Tactic narrow_cluster = {.id = sm90::kNarrowTactic + 2, .name = "narrow-cluster"},
               narrow_persistent = {.id = sm90::kNarrowTactic + 0, .name = "narrow-persistent"},
               narrow_one_shot = {.id = sm90::kNarrowTactic + 1, .name = "narrow-one-shot"};
  const int32_t rows = p.h_q * p.s_q;
  if (rows <= sm90::kSmallNarrowRows) {
    return {narrow_cluster, cluster, persistent, one_shot, narrow_persistent, narrow_one_shot};
  }
  if (rows <= sm90::kMaxNarrowRows) {
    return {cluster, persistent, one_shot, narrow_cluster, narrow_persistent, narrow_one_shot};
  }
  return {cluster, persistent, one_shot};
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
          "cluster, persistent, one-shot, and the same three with the narrow tile (h_q x s_q <= "
          "32)",
      .device_memory = true,
      .available = available,
      .can_run = can_run,
      .tactics = tactics,
      .create = create,
  };
  return entry;
}

}  // namespace mlakit
