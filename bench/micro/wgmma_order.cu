// Microbenchmark: does the tensor pipe run the wgmmas of different warpgroups in the order they
// were issued? One SM, three warpgroups: warpgroup 0 issues a block's Q K^T (36 wgmma m64n64k16,
// A and B from shared memory, one commit group), warpgroups 1 and 2 each a half P V (4 wgmma
// m64n256k16, B MN-major). Per round all three meet, then issue in one of these orders:
//   qk alone / pv alone: the one kind only;
//   qk first: the P V warpgroups wait (an mbarrier) until warpgroup 0 has issued all 36;
//   pv first: warpgroup 0 waits until both P V warpgroups have issued theirs;
//   together: nobody waits;
//   qk x2: warpgroups 0 and 1 each issue a Q K^T (of different blocks), at once.
// Each warpgroup notes when its group completed, in cycles from the round's start (clock64, one
// SM). In issue order, "qk first" finishes Q K^T as early as "qk alone" and P V about a Q K^T
// later; if the pipe shares itself between warpgroups, Q K^T finishes later than alone.
// Build and run on an sm_90a GPU:
//   nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -Isrc -o wgmma_order \
//     bench/micro/wgmma_order.cu && ./wgmma_order
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cuda/ptx>

#include "backends/sm90/wgmma.cuh"

using mlakit::sm90::smem_desc_sw128;
using mlakit::sm90::wgmma_commit_group;
using mlakit::sm90::wgmma_fence;
using mlakit::sm90::wgmma_m64n256k16_tb;
using mlakit::sm90::wgmma_m64n64k16;
using mlakit::sm90::wgmma_wait_group;

enum Order { kQkAlone, kPvAlone, kQkFirst, kPvFirst, kTogether, kQkTwice };
constexpr const char* kNames[] = {"qk alone", "pv alone", "qk first",
                                  "pv first", "together", "qk x2"};
constexpr int kRounds = 256;
constexpr int kABytes = 73728, kBBytes = 131072;

__device__ __forceinline__ void wait_parity(uint64_t* bar, uint32_t parity) {
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, parity)) {
  }
}

// The rounds of one warpgroup: meet, wait for the others' issue if `wait` (the order), issue one
// commit group, let the others go on if `signal`, wait for the group; the sum of each round's
// cycles to its group done. `issue` issues the group's wgmmas.
template <typename Issue>
__device__ __forceinline__ long long timed_rounds(uint64_t* issued, bool wait, bool signal,
                                                  Issue issue) {
  long long total = 0;
  for (int r = 0; r < kRounds; ++r) {
    __syncthreads();
    const long long t0 = clock64();
    if (wait) wait_parity(issued, r & 1);
    wgmma_fence();
    issue();
    wgmma_commit_group();
    if (signal) (void)cuda::ptx::mbarrier_arrive(issued);
    wgmma_wait_group<0>();
    total += clock64() - t0;
  }
  return total;
}

// A warpgroup without work still meets the others each round.
__device__ __forceinline__ void idle_rounds() {
  for (int r = 0; r < kRounds; ++r) __syncthreads();
}

// Warpgroup 0's part (Q K^T) and the others' (a half P V each), each with only its own
// accumulators in registers.
template <int kOrder>
__device__ __forceinline__ long long run_qk(uint32_t a_base, uint32_t b_base, uint64_t* issued) {
  float s[32] = {};
  const long long total = timed_rounds(issued, kOrder == kPvFirst, kOrder == kQkFirst, [&] {
#pragma unroll
    for (int i = 0; i < 36; ++i) {
      const uint32_t at = (i / 4) * 8192 + (i % 4) * 32;
      wgmma_m64n64k16<__nv_bfloat16>(s, smem_desc_sw128(a_base + at, 0, 1024),
                                     smem_desc_sw128(b_base + at, 0, 1024), 1);
    }
  });
  float keep = 0.0f;
  for (int i = 0; i < 32; ++i) keep += s[i];
  return total + (keep == 1.0f ? 1 : 0);
}

template <int kOrder>
__device__ __forceinline__ long long run_pv(uint32_t a_base, uint32_t b_base, uint64_t* issued,
                                            int wg) {
  float o[128] = {};
  const long long total = timed_rounds(issued, kOrder == kQkFirst, kOrder == kPvFirst, [&] {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      wgmma_m64n256k16_tb<__nv_bfloat16>(
          o, smem_desc_sw128(a_base + i * 32, 0, 1024),
          smem_desc_sw128(b_base + (wg - 1) * 32768 + i * 2048, 8192, 1024), 1);
    }
  });
  float keep = 0.0f;
  for (int i = 0; i < 128; ++i) keep += o[i];
  return total + (keep == 1.0f ? 1 : 0);
}

template <int kOrder>
__global__ void __launch_bounds__(384, 1) order_kernel(long long* sums) {
  extern __shared__ __align__(1024) uint8_t smem[];
  __shared__ uint64_t issued;  // qk first: warpgroup 0 issued (128); pv first: 1 and 2 (256)
  for (int i = threadIdx.x; i < (kABytes + kBBytes) / 16; i += blockDim.x) {
    reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
  }
  if (threadIdx.x == 0) {
    cuda::ptx::mbarrier_init(&issued, kOrder == kPvFirst ? 256 : 128);
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const uint32_t a_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t b_base = a_base + kABytes;
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  long long total = 0;
  if (kOrder == kQkTwice) {
    // Warpgroups 0 and 1, each its own block (B 36 KB apart), warpgroup 2 idle.
    if (wg < 2) {
      total = run_qk<kOrder>(a_base, b_base + wg * 36864, &issued);
    } else {
      idle_rounds();
    }
  } else if (wg == 0) {
    if (kOrder == kPvAlone) {
      idle_rounds();
    } else {
      total = run_qk<kOrder>(a_base, b_base, &issued);
    }
  } else if (kOrder == kQkAlone) {
    idle_rounds();
  } else {
    total = run_pv<kOrder>(a_base, b_base, &issued, wg);
  }
  if (threadIdx.x % 128 == 0) sums[wg] = total;
}

template <int kOrder>
void measure(long long* dev) {
  auto kernel = order_kernel<kOrder>;
  const int bytes = kABytes + kBBytes;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  long long host[3] = {};
  for (int rep = 0; rep < 3; ++rep) {  // the last of three launches (the first ones warm up)
    cudaMemset(dev, 0, sizeof host);
    kernel<<<1, 384, bytes>>>(dev);
    cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost);
  }
  if (cudaGetLastError() != cudaSuccess) {
    std::printf("%-9s launch failed\n", kNames[kOrder]);
    return;
  }
  std::printf("%-9s %10.0f %10.0f %10.0f\n", kNames[kOrder], host[0] / double{kRounds},
              host[1] / double{kRounds}, host[2] / double{kRounds});
}

int main() {
  long long* dev = nullptr;
  if (cudaMalloc(&dev, 3 * sizeof(long long)) != cudaSuccess) {
    std::printf("no GPU\n");
    return 1;
  }
  std::printf("cycles from a round's start to each warpgroup's group done (mean of %d rounds)\n",
              kRounds);
  std::printf("%-9s %10s %10s %10s\n", "order", "qk (wg0)", "pv (wg1)", "pv (wg2)");
  measure<kQkAlone>(dev);
  measure<kPvAlone>(dev);
  measure<kQkFirst>(dev);
  measure<kPvFirst>(dev);
  measure<kTogether>(dev);
  measure<kQkTwice>(dev);
  return 0;
}
