// Registry entry of the cpu backend: any page size, every dtype and layout, every feature. Runs
// synchronously on host memory; the stream argument is ignored.
#include <algorithm>

#include "backends/cpu/attention.h"
#include "core/backend.h"
#include "core/check.h"
#include "core/data_check.h"
#include "core/host_memory.h"
#include "core/parallel.h"
#include "mlakit/cp.h"

namespace mlakit {
namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Problem& problem, int threads) : problem_(problem), threads_(threads) {}
  std::string_view name() const override { return "cpu"; }
  size_t workspace_bytes() const override { return 0; }
  Status run(const RunArgs& args, void*, size_t, Stream) const override {
    MLAKIT_RETURN_IF_ERROR(check_host_data(problem_, args));
    cpu::attention(problem_, args, threads_);
    return Status::Ok();
  }

 private:
  Problem problem_;
  int threads_;
};

// The threads a run may use: one scratch each (cpu::scratch_bytes), within half of the host
// memory this process can have (the caller's arrays live in the same memory); 0 when not even
// one scratch fits, which creation refuses.
int threads_for(uint64_t scratch, uint64_t host) {
  if (scratch > host) return 0;
  return static_cast<int>(std::clamp<uint64_t>(host / 2 / scratch, 1, num_threads()));
}

Status available(const DeviceInfo&) { return Status::Ok(); }

Status can_run(const Problem& problem, const DeviceInfo&) {
  const uint64_t scratch = cpu::scratch_bytes(problem), host = host_memory_bytes();
  if (threads_for(scratch, host) > 0) return Status::Ok();
  return unsupported(
      "cpu backend: a run needs ", scratch,
      " bytes of host memory for each thread (its block of heads over ",
      problem.sparse() ? problem.topk + problem.extra_topk : cp_local_max_seq_len(problem),
      problem.sparse()             ? " top-k slots (extra ones included)"
      : problem.context_parallel() ? " local tokens of max_seq_len on this cp_rank"
                                   : " tokens of max_seq_len",
      "), more than the ", host, " bytes this process can have");
}

std::vector<Tactic> tactics(const Problem&) { return {{.id = 0, .name = "reference"}}; }

Status create(const Problem& problem, int, const DeviceInfo& device,
              std::unique_ptr<Backend>* out) {
  MLAKIT_RETURN_IF_ERROR(can_run(problem, device));
  const int threads = threads_for(cpu::scratch_bytes(problem), host_memory_bytes());
  *out = std::make_unique<CpuBackend>(problem, threads);
  return Status::Ok();
}

}  // namespace

const BackendEntry& cpu_backend_entry() {
  static const BackendEntry entry{
      .name = "cpu",
      .summary = "exact reference on the host (fp32 accumulation, fp64 softmax sums), threaded",
      .supports =
          "q/kv bf16, fp16, fp8 e4m3 (dense, one scale), fp8 blockwise (V3.2, 656 B) and "
          "fp8_v4 (DeepSeek V4, d_qk 512); any page size; s_q 1..16 causal; variable query "
          "lengths (var_q, dense or sparse, context parallel too); variable lengths; sinks; sparse "
          "top-k with an extra cache; lse",
      .device_memory = false,
      .available = available,
      .can_run = can_run,
      .tactics = tactics,
      .create = create,
  };
  return entry;
}

}  // namespace mlakit
