// Schedule studies of the sm90 decode kernel: with MLAKIT_SM90_TRACE defined (off in every normal
// build, where all of this compiles away), CTA 0 stamps clock64() at the steps of its schedule
// and the host prints the last launch's stamps at exit. scripts/trace-sm90.sh builds and runs it,
// scripts/trace_sm90.py reads the stamps; docs/sm90-decode.md has what it measured.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "backends/sm90/config.h"

namespace mlakit::sm90 {

#ifdef MLAKIT_SM90_TRACE
static __device__ unsigned long long g_trace[4][4096];
static __device__ int g_trace_count[4];
// The last launch's timeline, printed at exit ("T role id clock").
inline void trace_print_at_exit() {
  static const bool registered = [] {
    std::atexit([] {
      static unsigned long long stamps[4][4096];
      int counts[4] = {};
      if (cudaMemcpyFromSymbol(stamps, g_trace, sizeof stamps) != cudaSuccess ||
          cudaMemcpyFromSymbol(counts, g_trace_count, sizeof counts) != cudaSuccess) {
        return;
      }
      for (int r = 0; r < 4; ++r) {
        for (int i = 0; i < counts[r] && i < 4096; ++i) {
          std::printf("T %d %d %llu\n", r, static_cast<int>(stamps[r][i] >> 56),
                      stamps[r][i] & 0xFFFFFFFFFFFFFFull);
        }
      }
    });
    return true;
  }();
  (void)registered;
}
#endif

// Timeline of CTA 0 for schedule studies (stamps in global memory: a printf in the kernel made
// ptxas serialize the wgmmas, C7510): role 0/1 the consumer warpgroups, 2 the producer, 3 the
// watcher warp; one stamp (id, clock64) per event.
#ifdef MLAKIT_SM90_TRACE
__device__ __forceinline__ int& trace_count(int role) {
  __shared__ int counts[4];  // only read and written by the one tracing thread of each role
  return counts[role];
}
__device__ __forceinline__ void trace(int role, int id) {
  if (blockIdx.x == 0 && (threadIdx.x % 128 == 0 || threadIdx.x == kConsumerThreads + 32)) {
    const int n = trace_count(role);
    if (n < 4096) {
      g_trace[role][n] =
          (static_cast<unsigned long long>(id) << 56) | (clock64() & 0xFFFFFFFFFFFFFFull);
      trace_count(role) = n + 1;
    }
  }
}
__device__ __forceinline__ void trace_dump() {
  for (int role = 0; role < 4; ++role) g_trace_count[role] = trace_count(role);
}
#else
__device__ __forceinline__ void trace(int, int) {}
__device__ __forceinline__ void trace_dump() {}
#endif

}  // namespace mlakit::sm90
