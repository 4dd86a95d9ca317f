// Timing of steps that span several GPUs (harness/timing.h): threads for the calls that may wait
// on other ranks, one host thread for the graph replays.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "core/cuda_check.h"
#include "core/guard.h"
#include "harness/graph_run.h"
#include "harness/timing.h"

namespace mlakit::harness {

Status RankGroup::sync(Stream stream) const {
  for (;;) {
    const cudaError_t query = cudaStreamQuery(stream);
    if (query == cudaSuccess) return Status::Ok();
    if (query != cudaErrorNotReady) {
      return cuda_status(query, "cudaStreamQuery", __FILE__, __LINE__);
    }
    (void)cudaGetLastError();  // "not ready" is no error: leave none for the next check
    if (failed_.load()) {
      return Status(StatusCode::kInternal,
                    "gave up waiting for this rank's stream: another rank failed");
    }
    std::this_thread::yield();
  }
}

Status for_each_rank(std::span<const int> devices,
                     const std::function<Status(int rank, const RankGroup& group)>& fn) {
  return guarded("for_each_rank", [&]() -> Status {
    const int n = static_cast<int>(devices.size());
    std::vector<Status> status(n);
    RankGroup group;
    // The first rank to fail; set before group.failed_, so never a rank that only gave up.
    std::atomic<int> first_failed{-1};
    std::vector<std::thread> threads;
    // Joins whatever was started, also when starting a thread throws (then the ranks started
    // must not wait for the others).
    struct Joiner {
      std::vector<std::thread>& threads;
      RankGroup& group;
      int n;
      ~Joiner() {
        if (static_cast<int>(threads.size()) < n) group.failed_ = true;
        for (std::thread& t : threads) {
          if (t.joinable()) t.join();
        }
      }
    } joiner{threads, group, n};
    threads.reserve(n);
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        status[r] = guarded("for_each_rank", [&]() -> Status {
          MLAKIT_CUDA_RETURN(cudaSetDevice(devices[r]));
          return fn(r, group);
        });
        if (!status[r].ok()) {
          int none = -1;
          first_failed.compare_exchange_strong(none, r);
          group.failed_ = true;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    const int r = first_failed;
    if (r < 0) return Status::Ok();
    return Status(status[r].code(), str_cat("rank ", r, ": ", status[r].message()));
  });
}

Status time_gpu_ranks(std::span<const int> devices,
                      const std::function<Status(int rank, int k, Stream stream)>& launch,
                      int copies, const TimingOptions& options, std::vector<Timing>* per_rank,
                      Timing* step) {
  const int n = static_cast<int>(devices.size());
  const int launches = std::max(options.min_launches, std::max(1, copies));
  std::vector<GraphRun> g(n);
  // The uncaptured call (module loads, NCCL's connections), then the capture, on every rank at
  // once. Capture records the NCCL calls without communicating.
  MLAKIT_RETURN_IF_ERROR(for_each_rank(devices, [&](int r, const RankGroup& group) -> Status {
    GraphRun& rg = g[r];
    MLAKIT_CUDA_RETURN(cudaStreamCreateWithFlags(&rg.stream, cudaStreamNonBlocking));
    MLAKIT_CUDA_RETURN(cudaEventCreate(&rg.start));
    MLAKIT_CUDA_RETURN(cudaEventCreate(&rg.stop));
    MLAKIT_RETURN_IF_ERROR(launch(r, 0, rg.stream));
    MLAKIT_RETURN_IF_ERROR(group.sync(rg.stream));
    MLAKIT_CUDA_RETURN(cudaStreamBeginCapture(rg.stream, cudaStreamCaptureModeThreadLocal));
    Status run_status;
    for (int k = 0; k < launches && run_status.ok(); ++k) run_status = launch(r, k, rg.stream);
    const cudaError_t end = cudaStreamEndCapture(rg.stream, &rg.graph);
    MLAKIT_RETURN_IF_ERROR(run_status);
    MLAKIT_CUDA_RETURN(end);
    MLAKIT_CUDA_RETURN(cudaGraphInstantiate(&rg.exec, rg.graph, 0));
    return Status::Ok();
  }));

  // Graph launches do not wait on the host: one thread starts every rank's replay. A launch that
  // fails returns at once, before any wait: the ranks launched before it wait for their peers
  // until the caller aborts the communicators.
  const auto replay_all = [&](bool timed) -> Status {
    for (int r = 0; r < n; ++r) {
      MLAKIT_CUDA_RETURN(cudaSetDevice(devices[r]));
      if (timed) MLAKIT_CUDA_RETURN(cudaEventRecord(g[r].start, g[r].stream));
      MLAKIT_CUDA_RETURN(cudaGraphLaunch(g[r].exec, g[r].stream));
      if (timed) MLAKIT_CUDA_RETURN(cudaEventRecord(g[r].stop, g[r].stream));
    }
    return Status::Ok();
  };
  const auto wait_all = [&]() -> Status {
    for (int r = 0; r < n; ++r) MLAKIT_CUDA_RETURN(cudaStreamSynchronize(g[r].stream));
    return Status::Ok();
  };
  for (int k = 0; k < options.warmup; ++k) MLAKIT_RETURN_IF_ERROR(replay_all(false));
  MLAKIT_RETURN_IF_ERROR(wait_all());
  if (options.settle_ms > 0) {
    // A count, the same for every rank (each rank stopping on its own clock could leave one
    // rank's collectives without peers): from the time of one replay.
    const auto t0 = std::chrono::steady_clock::now();
    MLAKIT_RETURN_IF_ERROR(replay_all(false));
    MLAKIT_RETURN_IF_ERROR(wait_all());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const int settle = static_cast<int>(std::min(options.settle_ms / std::max(ms, 1e-3), 1e6));
    for (int k = 0; k < settle; ++k) {
      MLAKIT_RETURN_IF_ERROR(replay_all(false));
      MLAKIT_RETURN_IF_ERROR(wait_all());
    }
  }
  std::vector<std::vector<double>> rank_us(n);
  std::vector<double> step_us;
  for (int k = 0; k < std::max(1, options.replays); ++k) {
    MLAKIT_RETURN_IF_ERROR(replay_all(true));
    double slowest = 0;
    for (int r = 0; r < n; ++r) {
      MLAKIT_CUDA_RETURN(cudaEventSynchronize(g[r].stop));
      float ms = 0;
      MLAKIT_CUDA_RETURN(cudaEventElapsedTime(&ms, g[r].start, g[r].stop));
      rank_us[r].push_back(1000.0 * ms / launches);
      slowest = std::max(slowest, rank_us[r].back());
    }
    step_us.push_back(slowest);
  }
  per_rank->clear();
  for (int r = 0; r < n; ++r) {
    per_rank->push_back(summarize(rank_us[r]));
    per_rank->back().copies = copies;
    per_rank->back().launches = launches;
  }
  *step = summarize(std::move(step_us));
  step->copies = copies;
  step->launches = launches;
  return Status::Ok();
}

}  // namespace mlakit::harness
