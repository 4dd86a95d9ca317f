// Registry entry of the cpu backend: any page size, every dtype and layout, every feature. Runs
// synchronously on host memory; the stream argument is ignored.
#include "backends/cpu/attention.h"
#include "core/backend.h"
#include "core/check.h"

namespace mlakit {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const Problem& problem) : problem_(problem) {}
  std::string_view name() const override { return "cpu"; }
  size_t workspace_bytes() const override { return 0; }
  Status run(const RunArgs& args, void*, size_t, Stream) const override {
    MLAKIT_RETURN_IF_ERROR(cpu::check_host_data(problem_, args));
    cpu::attention(problem_, args);
    return Status::Ok();
  }

 private:
  Problem problem_;
};

Status available(const DeviceInfo&) { return Status::Ok(); }
Status can_run(const Problem&, const DeviceInfo&) { return Status::Ok(); }
std::vector<Tactic> tactics(const Problem&) { return {{.id = 0, .name = "reference"}}; }

Status create(const Problem& problem, int, const DeviceInfo&, std::unique_ptr<Backend>* out) {
  *out = std::make_unique<CpuBackend>(problem);
  return Status::Ok();
}

}  // namespace

const BackendEntry& cpu_backend_entry() {
  static const BackendEntry entry{
      .name = "cpu",
      .summary = "exact reference on the host (fp32 accumulation, fp64 softmax sums), threaded",
      .supports =
          "q/kv bf16, fp16, fp8 e4m3 (dense, one scale) and fp8 blockwise (656 B); any "
          "page size; s_q 1..16 causal; variable lengths; sinks; sparse top-k; lse",
      .device_memory = false,
      .available = available,
      .can_run = can_run,
      .tactics = tactics,
      .create = create,
  };
  return entry;
}

}  // namespace mlakit
