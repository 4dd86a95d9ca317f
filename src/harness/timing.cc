#include "harness/timing.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>

#include "core/cuda_check.h"
#include "harness/graph_run.h"

namespace mlakit::harness {

int cold_copies(size_t bytes_per_run, size_t l2_bytes, size_t max_total_bytes) {
  if (bytes_per_run == 0) return 1;
  // Stream at least 3x the L2 between two uses of the same copy; at least 2 copies so that the
  // previous run's tail never sits in L2.
  const size_t want = (3 * l2_bytes + bytes_per_run - 1) / bytes_per_run;
  size_t copies = std::clamp<size_t>(want, 2, 512);
  copies = std::min(copies, std::max<size_t>(1, max_total_bytes / bytes_per_run));
  return static_cast<int>(copies);
}

Status upload_cold_copies(const HostInputs& host, size_t l2_bytes, size_t max_total_bytes,
                          std::vector<DeviceInputs>* copies) {
  const size_t per_run = host.kv.size() + host.q.size() + host.out_bytes();
  copies->clear();
  copies->resize(cold_copies(per_run, l2_bytes, max_total_bytes));
  for (DeviceInputs& d : *copies) MLAKIT_RETURN_IF_ERROR(DeviceInputs::upload(host, &d));
  return Status::Ok();
}

Status time_gpu_launches(const std::function<Status(int k, Stream stream)>& launch, int copies,
                         const TimingOptions& options, Timing* timing) {
  GraphRun g;
  MLAKIT_CUDA_RETURN(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  MLAKIT_CUDA_RETURN(cudaEventCreate(&g.start));
  MLAKIT_CUDA_RETURN(cudaEventCreate(&g.stop));

  // One uncaptured run first: module load and first-launch costs, and a clean error if it fails.
  MLAKIT_RETURN_IF_ERROR(launch(0, g.stream));
  MLAKIT_CUDA_RETURN(cudaStreamSynchronize(g.stream));

  const int n = std::max(1, copies);
  const int launches = std::max(options.min_launches, n);
  MLAKIT_CUDA_RETURN(cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeThreadLocal));
  Status run_status;
  for (int k = 0; k < launches && run_status.ok(); ++k) run_status = launch(k % n, g.stream);
  const cudaError_t end = cudaStreamEndCapture(g.stream, &g.graph);
  MLAKIT_RETURN_IF_ERROR(run_status);
  MLAKIT_CUDA_RETURN(end);
  MLAKIT_CUDA_RETURN(cudaGraphInstantiate(&g.exec, g.graph, 0));

  for (int k = 0; k < options.warmup; ++k) MLAKIT_CUDA_RETURN(cudaGraphLaunch(g.exec, g.stream));
  if (options.settle_ms > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    while (
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() <
        options.settle_ms) {
      MLAKIT_CUDA_RETURN(cudaGraphLaunch(g.exec, g.stream));
      MLAKIT_CUDA_RETURN(cudaStreamSynchronize(g.stream));
    }
  }
  int device = 0;
  MLAKIT_CUDA_RETURN(cudaGetDevice(&device));
  PowerSampler sampler(device);
  sampler.start();
  std::vector<double> per_call;
  for (int k = 0; k < options.replays; ++k) {
    MLAKIT_CUDA_RETURN(cudaEventRecord(g.start, g.stream));
    MLAKIT_CUDA_RETURN(cudaGraphLaunch(g.exec, g.stream));
    MLAKIT_CUDA_RETURN(cudaEventRecord(g.stop, g.stream));
    MLAKIT_CUDA_RETURN(cudaEventSynchronize(g.stop));
    float ms = 0;
    MLAKIT_CUDA_RETURN(cudaEventElapsedTime(&ms, g.start, g.stop));
    per_call.push_back(1000.0 * ms / launches);
  }
  const PowerReading power = sampler.stop();
  *timing = summarize(std::move(per_call));
  timing->power = power;
  timing->copies = n;
  timing->launches = launches;
  return Status::Ok();
}

Status time_gpu(const Decoder& decoder, const std::vector<DeviceInputs>& copies,
                const TimingOptions& options, Timing* timing) {
  const size_t ws_bytes = decoder.workspace_bytes();
  DeviceBuffer workspace(std::max<size_t>(ws_bytes, 256));
  if (workspace.get() == nullptr) return Status(StatusCode::kCudaError, "workspace cudaMalloc");
  return time_gpu_launches(
      [&](int k, Stream stream) {
        return decoder.run(copies[k].args, workspace.get(), ws_bytes, stream);
      },
      static_cast<int>(copies.size()), options, timing);
}

Status time_cpu_calls(const std::function<Status()>& call, int replays, Timing* timing) {
  std::vector<double> per_call;
  for (int k = 0; k < std::max(1, replays); ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    MLAKIT_RETURN_IF_ERROR(call());
    const auto t1 = std::chrono::steady_clock::now();
    per_call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  *timing = summarize(std::move(per_call));
  return Status::Ok();
}

Status time_cpu(const Decoder& decoder, const HostInputs& inputs, void* out, float* lse,
                int replays, Timing* timing) {
  const RunArgs args = inputs.args(out, lse);
  return time_cpu_calls([&] { return decoder.run(args, nullptr, 0, nullptr); }, replays, timing);
}

}  // namespace mlakit::harness
