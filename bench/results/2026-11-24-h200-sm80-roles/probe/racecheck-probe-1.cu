// racecheck probe: does compute-sanitizer racecheck take a barrier reached from two sides of a
// warp-role branch as ordering a shared-memory write (warp 0) before a read (warp 1)?
#include <cstdio>
__device__ float sink;
template <int kMode>
__global__ void probe() {
  __shared__ float buf[64];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float v = 0.f;
  if (kMode == 0) {  // convergent __syncthreads
    if (warp == 0) buf[lane] = lane;
    __syncthreads();
    if (warp == 1) v = buf[lane];
  } else if (kMode == 1) {  // bar.sync 0 from both sides of the branch
    if (warp == 0) {
      buf[lane] = lane;
      asm volatile("bar.sync 0;" ::: "memory");
    } else {
      asm volatile("bar.sync 0;" ::: "memory");
      v = buf[lane];
    }
  } else if (kMode == 2) {  // named barrier 1, 64 threads, both sides
    if (warp == 0) {
      buf[lane] = lane;
      asm volatile("bar.sync 1, 64;" ::: "memory");
    } else {
      asm volatile("bar.sync 1, 64;" ::: "memory");
      v = buf[lane];
    }
  } else if (kMode == 3) {  // arrive / sync
    if (warp == 0) {
      buf[lane] = lane;
      asm volatile("bar.arrive 1, 64;" ::: "memory");
    } else {
      asm volatile("bar.sync 1, 64;" ::: "memory");
      v = buf[lane];
    }
  } else if (kMode == 4) {  // loop of 4 rounds, bar.sync 0 both sides, write then read
    for (int r = 0; r < 4; ++r) {
      if (warp == 0) {
        buf[lane] = lane + r;
        asm volatile("bar.sync 0;" ::: "memory");
      } else {
        asm volatile("bar.sync 0;" ::: "memory");
        v += buf[lane];
      }
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
  probe<2><<<1, 64>>>();
  cudaDeviceSynchronize();
  printf("mode 2 done\n");
  probe<3><<<1, 64>>>();
  cudaDeviceSynchronize();
  printf("mode 3 done\n");
  probe<4><<<1, 64>>>();
  cudaDeviceSynchronize();
  printf("mode 4 done\n");
  return 0;
}
