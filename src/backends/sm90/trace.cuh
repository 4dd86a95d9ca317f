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

inline constexpr int kTraceRoles = 4;      // consumer warpgroups 0 and 1, producer, watcher
inline constexpr int kTraceStamps = 4096;  // per role; later stamps are dropped
// The grid's timeline: per CTA (the first kGridCtas), %globaltimer (ns, common to all SMs) at
// kGridEvents events, and the SM it ran on.
inline constexpr int kGridCtas = 2048;
inline constexpr int kGridEvents = 11;

#ifdef MLAKIT_SM90_TRACE
static __device__ unsigned long long g_trace[kTraceRoles][kTraceStamps];
static __device__ int g_trace_count[kTraceRoles];
static __device__ unsigned long long g_grid[kGridCtas][kGridEvents];
static __device__ unsigned g_grid_sm[kGridCtas];
// The last launch's timeline, printed at exit ("T role id clock"). Without relocatable device
// code each translation unit has its own g_trace, so each one that launches a kernel registers
// its own printer (internal linkage; an inline function would be merged into one translation
// unit's, which prints nothing for kernels instantiated in the others).
static void trace_print_at_exit() {
  static const bool registered = [] {
    std::atexit([] {
      static unsigned long long stamps[kTraceRoles][kTraceStamps];
      int counts[kTraceRoles] = {};
      if (cudaMemcpyFromSymbol(stamps, g_trace, sizeof stamps) != cudaSuccess ||
          cudaMemcpyFromSymbol(counts, g_trace_count, sizeof counts) != cudaSuccess) {
        return;
      }
      for (int r = 0; r < kTraceRoles; ++r) {
        for (int i = 0; i < counts[r] && i < kTraceStamps; ++i) {
          std::printf("T %d %d %llu\n", r, static_cast<int>(stamps[r][i] >> 56),
                      stamps[r][i] & 0xFFFFFFFFFFFFFFull);
        }
      }
      static unsigned long long grid[kGridCtas][kGridEvents];
      static unsigned grid_sm[kGridCtas];
      if (cudaMemcpyFromSymbol(grid, g_grid, sizeof grid) != cudaSuccess ||
          cudaMemcpyFromSymbol(grid_sm, g_grid_sm, sizeof grid_sm) != cudaSuccess) {
        return;
      }
      for (int c = 0; c < kGridCtas; ++c) {
        if (grid[c][0] == 0) continue;
        std::printf("G %d %u", c, grid_sm[c]);
        for (int e = 0; e < kGridEvents; ++e) std::printf(" %llu", grid[c][e]);
        std::printf("\n");
      }
    });
    return true;
  }();
  (void)registered;
}

// Timeline of CTA 0 for schedule studies (stamps in global memory: a printf in the kernel made
// ptxas serialize the wgmmas, C7510): role 0/1 the consumer warpgroups, 2 the producer, 3 the
// watcher warp; one stamp (id, clock64) per event, from one thread per role (thread 0 of each
// warpgroup, and lane 0 of the watcher warp).
__device__ __forceinline__ int& trace_count(int role) {
  // Each count is read and written only by its role's one tracing thread.
  __shared__ int counts[kTraceRoles];
  return counts[role];
}
__device__ __forceinline__ void trace(int role, int id) {
  if (blockIdx.x == 0 && (threadIdx.x % 128 == 0 || threadIdx.x == kConsumerThreads + 32)) {
    const int n = trace_count(role);
    if (n < kTraceStamps) {
      g_trace[role][n] =
          (static_cast<unsigned long long>(id) << 56) | (clock64() & 0xFFFFFFFFFFFFFFull);
      trace_count(role) = n + 1;
    }
  }
}
// The grid's timeline: event e of this CTA, stamped by the calling thread (one per CTA and
// event; with several chunks per CTA, the last chunk's). 0 entry, 1 past the PDL wait and the
// setup barrier, 2 the first block's data seen by a consumer, 3 warpgroup 0's last block done,
// 6 both consumer warpgroups at the epilogue barrier, 7 the rows' LSE and scale worked out, 4 the
// epilogue's stores issued, 5 exit; narrow tile: 8 and 9 its first row pass written by warpgroup
// 0 and added by warpgroup 1, 10 that pass stored. A later launch with fewer CTAs leaves the rest
// stale (scripts/grid_timeline.py).
__device__ __forceinline__ void grid_stamp(int e) {
  if (blockIdx.x < kGridCtas) {
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    g_grid[blockIdx.x][e] = ns;
    if (e == 0) {
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      g_grid_sm[blockIdx.x] = sm;
    }
  }
}
// Thread 0, before the kernel's first stamp.
__device__ __forceinline__ void trace_reset() {
  for (int role = 0; role < kTraceRoles; ++role) trace_count(role) = 0;
}
// Every thread, at the kernel's end: the counts out for the host.
__device__ __forceinline__ void trace_finish() {
  __syncthreads();
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (int role = 0; role < kTraceRoles; ++role) g_trace_count[role] = trace_count(role);
  }
}
#else
inline void trace_print_at_exit() {}
__device__ __forceinline__ void trace(int, int) {}
__device__ __forceinline__ void grid_stamp(int) {}
__device__ __forceinline__ void trace_reset() {}
__device__ __forceinline__ void trace_finish() {}
#endif

}  // namespace mlakit::sm90
