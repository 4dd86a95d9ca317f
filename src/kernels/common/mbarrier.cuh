// Waiting for an mbarrier phase, for every kernel that pipelines through mbarriers.
#pragma once

#include <cstdint>
#include <cuda/ptx>

namespace mlakit {

// The suspend-time hint of mbarrier.try_wait, in nanoseconds: the longest a waiting thread may
// sleep in hardware before the instruction returns false; it wakes when the phase completes.
// Without a hint the instruction returns after a short system-dependent time, and the loop below
// polls: on an H200 the persistent indexer kernel's producer warps took 18 polls (56 issued
// instructions) a tile at next_n 2, issue slots their schedulers' consumer warps needed (ncu,
// bench/results/2026-11-28-h200-indexer-wait). CUTLASS's ClusterBarrier::wait uses the same value.
inline constexpr uint32_t kMbarrierSuspendHintNs = 0x989680;

// Waits until the phase of `bar` with parity `parity` has completed (sm_90: try_wait with the
// hint; sm_80: polling test_wait).
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t hint = kMbarrierSuspendHintNs;  // a value: cuda::ptx takes a reference
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, parity, hint)) {
  }
#else
  while (!cuda::ptx::mbarrier_test_wait_parity(bar, parity)) {
  }
#endif
}

}  // namespace mlakit
