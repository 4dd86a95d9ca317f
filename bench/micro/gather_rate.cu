// Microbenchmark: how fast one GPU reads rows gathered at random from a large cache, the access
// pattern of sparse decode (each query token's top-k rows of 656 bytes, anywhere in the cache),
// against the same bytes read in order. No arithmetic: every warp reads whole rows with 16-byte
// loads (lane i the i-th 16 bytes of a 512-byte run) and folds them into one word per thread.
// Build and run on the GPU (needs ~13 GB of device memory):
//   nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -o gather_rate \
//     bench/micro/gather_rate.cu && ./gather_rate
// Prints, per row size, threads per SM and rows a warp keeps in flight: GB/s for random rows and
// for the same bytes in order.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

namespace {

#define CHECK(x)                                                  \
  do {                                                            \
    cudaError_t e_ = (x);                                         \
    if (e_ != cudaSuccess) {                                      \
      std::printf("%s failed: %s\n", #x, cudaGetErrorString(e_)); \
      return 1;                                                   \
    }                                                             \
  } while (0)

// Warp w of the grid reads rows w, w + warps, ... (kRows of them at a time, all their loads in
// flight before any is used): row r starts at base + rows[r] * row_bytes (or r * row_bytes when
// rows is null); its 16-byte pieces are spread over the lanes in order (row_bytes <= 1024). The
// row numbers are loaded in the loop, so random rows also wait for that load each time: their
// rates here are lower bounds (gather_copy_rate.cu reads the numbers ahead).
template <int kRows>
__global__ void gather(const uint8_t* base, const int64_t* rows, int64_t n_rows, int row_bytes,
                       uint32_t* sink) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / 32;
  const int pieces = row_bytes / 16;
  uint32_t acc = 0;
  for (int64_t r0 = warp * kRows; r0 < n_rows; r0 += warps * kRows) {
    uint4 v[kRows][2];
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      const int64_t r = r0 + k;
      const uint8_t* row = base + (rows != nullptr ? rows[min(r, n_rows - 1)] : r) * row_bytes;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = lane + 32 * h;
        v[k][h] = make_uint4(0, 0, 0, 0);
        if (r < n_rows && i < pieces) {
          asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(v[k][h].x), "=r"(v[k][h].y), "=r"(v[k][h].z), "=r"(v[k][h].w)
                       : "l"(row + 16 * i));
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
#pragma unroll
      for (int h = 0; h < 2; ++h) acc ^= v[k][h].x ^ v[k][h].y ^ v[k][h].z ^ v[k][h].w;
    }
  }
  if (acc == 0x12345678u) sink[0] = acc;  // keeps the loads
}

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t pool_bytes = size_t{12} << 30;  // as the sparse benchmarks' cache
  uint8_t* pool = nullptr;
  uint32_t* sink = nullptr;
  CHECK(cudaMalloc(&pool, pool_bytes));
  CHECK(cudaMemset(pool, 1, pool_bytes));
  CHECK(cudaMalloc(&sink, 4));
  const int64_t n_rows = int64_t{128} * 2048;  // batch 128 x topk 2048
  int64_t* rows = nullptr;
  CHECK(cudaMalloc(&rows, n_rows * 8));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::printf("%s, %d SMs; %lld rows a run from a %zu GB pool\n", prop.name, sms,
              static_cast<long long>(n_rows), pool_bytes >> 30);
  std::printf("%-9s %-10s %-6s %12s %12s\n", "row_bytes", "threads/SM", "rows", "random GB/s",
              "in-order GB/s");
  std::mt19937_64 rng(7);
  for (const int row_bytes : {656, 576, 1024}) {
    // Rows within the first half of the pool; each run shifts the whole set (no run finds the
    // previous one's rows in L2).
    const int64_t pool_rows = static_cast<int64_t>(pool_bytes / 2 / row_bytes);
    std::vector<int64_t> host(n_rows);
    for (int64_t& r : host) r = static_cast<int64_t>(rng() % static_cast<uint64_t>(pool_rows));
    CHECK(cudaMemcpy(rows, host.data(), n_rows * 8, cudaMemcpyHostToDevice));
    for (const auto [threads, unroll] :
         {std::pair{256, 1}, std::pair{512, 1}, std::pair{1024, 1}, std::pair{2048, 1},
          std::pair{256, 4}, std::pair{512, 4}, std::pair{1024, 4}, std::pair{256, 8},
          std::pair{512, 8}}) {
      float ms[2] = {0, 0};
      for (int order = 0; order < 2; ++order) {
        // In order: each run reads a fresh stretch of the pool (nothing from L2).
        const int64_t stretch = n_rows;
        float best = 1e30f;
        for (int rep = 0; rep < 6; ++rep) {
          const size_t shift = order == 0 ? size_t{1009} * 16 * rep * row_bytes
                                          : size_t(rep % 40) * stretch * row_bytes;
          const uint8_t* base = pool + shift % (pool_bytes / 2) / 16 * 16;
          CHECK(cudaEventRecord(start));
          const int64_t* r = order == 0 ? rows : nullptr;
          const dim3 grid(sms * (threads / 256));
          if (unroll == 1) gather<1><<<grid, 256>>>(base, r, n_rows, row_bytes, sink);
          if (unroll == 4) gather<4><<<grid, 256>>>(base, r, n_rows, row_bytes, sink);
          if (unroll == 8) gather<8><<<grid, 256>>>(base, r, n_rows, row_bytes, sink);
          CHECK(cudaEventRecord(stop));
          CHECK(cudaEventSynchronize(stop));
          float t = 0;
          CHECK(cudaEventElapsedTime(&t, start, stop));
          if (rep > 0 && t < best) best = t;
        }
        ms[order] = best;
      }
      const double bytes = static_cast<double>(n_rows) * row_bytes;
      std::printf("%-9d %-10d %-6d %12.0f %12.0f\n", row_bytes, threads, unroll,
                  bytes / ms[0] / 1e6, bytes / ms[1] / 1e6);
    }
  }
  return 0;
}
