// Pieces shared by the single-GPU and the multi-GPU timing (timing.cc, timing_ranks.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "harness/timing.h"

namespace mlakit::harness {

// Median, min and max of per-call times.
inline Timing summarize(std::vector<double> per_call_us) {
  std::sort(per_call_us.begin(), per_call_us.end());
  Timing t;
  t.median_us = per_call_us[per_call_us.size() / 2];
  t.min_us = per_call_us.front();
  t.max_us = per_call_us.back();
  return t;
}

// Owns a stream, a graph and events; releases them on every exit path.
struct GraphRun {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  GraphRun() = default;
  GraphRun(const GraphRun&) = delete;
  GraphRun& operator=(const GraphRun&) = delete;
  ~GraphRun() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (stream) cudaStreamDestroy(stream);
  }
};

}  // namespace mlakit::harness
