// racecheck probe 2: the kRoles alpha handoff in miniature. Warp 0 (producer) writes buf[r & 1]
// then passes barrier 0; warp 1 (consumer) passes barrier 0 then reads buf[r & 1]; one barrier per
// round, double buffer: the write of round r + 2 comes after barrier r + 1, which the consumer
// reaches only after its read of round r. Race-free by construction.
#include <cstdio>
#include <cuda/ptx>
__device__ float sink;
template <int kMode>
__global__ void probe() {
  __shared__ float buf[2][32];
  __shared__ uint64_t bar;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) cuda::ptx::mbarrier_init(&bar, 32);
  __syncthreads();
  float v = 0.f;
  if (warp == 0) {
    for (int r = 0; r < 8; ++r) {
      buf[r & 1][lane] = lane + r;
      if (kMode == 1 && r >= 1)
        while (!cuda::ptx::mbarrier_try_wait_parity(&bar, (r - 1) & 1)) {
        }
      asm volatile("bar.sync 0;" ::: "memory");
    }
  } else {
    for (int r = 0; r < 8; ++r) {
      asm volatile("bar.sync 0;" ::: "memory");
      if (kMode == 1) (void)cuda::ptx::mbarrier_arrive(&bar);
      v += buf[r & 1][lane];
    }
  }
  if (v == 12345.f) sink = v;
}
int main() {
  probe<0><<<1, 64>>>();
  cudaDeviceSynchronize();
  printf("mode 0 done\n");
  probe<1><<<1, 64>>>();
  cudaDeviceSynchronize();
  printf("mode 1 done\n");
  return 0;
}
