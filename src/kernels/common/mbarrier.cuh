// Waiting for an mbarrier phase, for every kernel that pipelines through mbarriers.
#pragma once

#include <cstdint>
#include <cuda/ptx>

namespace mlakit {

// The suspend-time hint of mbarrier.try_wait, in nanoseconds (CUTLASS's ClusterBarrier::wait
// passes the same): the longest a waiting thread may sleep in hardware before the instruction
// returns false; ptxas makes it a NANOSLEEP.SYNCS after a failed try. It did not make a waiting
// warp poll less, nor did __nanosleep(256) between polls: the persistent indexer kernel's
// producers polled about 17 times a tile at 32 x 128K next_n 2 in each form, and the polls drew
// almost no stall samples (ncu, H200; bench/results/2026-11-28-h200-indexer-wait, calls 2, 7, 8).
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
