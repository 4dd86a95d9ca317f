// Microbenchmark: the ways a sparse-decode producer can gather random 656-byte rows (the V3.2
// cache's tokens) into shared memory, one CTA an SM as in the decode kernels. W warps each keep D
// rows in flight in a ring of their own:
//   cp.async  every lane copies 16-byte pieces (cp.async.cg), one commit group a row;
//   bulk      lane 0 issues one cp.async.bulk a row, completing on the slot's mbarrier.
// Before a slot is reused its row is waited for and one word of it read. Each warp reads its
// row numbers 32 rows ahead, as the decode kernels read their slots ahead. Against the same bytes
// in order. On an H200 (2026-11-28, bench/results/2026-11-28-h200-sparse-producer, call 2): a
// warp's copies stream at a fixed rate whatever its depth, so 4 warps an SM gather ~2.0 TB/s, 8
// ~3.1, 16 and 32 ~3.4; random rows as fast as in order; bulk copies 10-28% slower.
// Build and run on an sm_90a GPU (~13 GB of device memory):
//   nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -o gather_copy_rate \
//     bench/micro/gather_copy_rate.cu && ./gather_copy_rate
// Prints, per mechanism, warps a CTA and rows in flight a warp: GB/s random and in order.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cuda/ptx>
#include <random>
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

constexpr int kRowBytes = 656;
constexpr int kPieces = kRowBytes / 16;
constexpr int kMaxWarps = 32;

__device__ __forceinline__ void wait_parity(uint64_t* bar, uint32_t parity) {
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, parity)) {
  }
}

// kBulk: 0 cp.async, 1 cp.async.bulk. rows null: row r is the r-th of the pool in order.
template <int kBulk, int kDepth>
__global__ void copy_rows(const uint8_t* base, const int64_t* rows, int64_t n_rows,
                          uint32_t* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t bars[kMaxWarps][kDepth];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  uint8_t* ring = smem + warp * kDepth * kRowBytes;
  if (kBulk && lane == 0) {
    for (int d = 0; d < kDepth; ++d) cuda::ptx::mbarrier_init(&bars[warp][d], 1);
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
  }
  __syncwarp();
  const int64_t first = int64_t{blockIdx.x} * warps + warp, step = int64_t{gridDim.x} * warps;
  uint32_t acc = 0;
  // The warp's row numbers 32 at a time, lane j the j-th, loaded a batch of 32 ahead as the
  // decode kernels read their slots ahead: no index load waits in the copy loop.
  const auto index_at = [&](int64_t k) -> int64_t {
    const int64_t r = first + k * step;
    return rows == nullptr ? r : (r < n_rows ? rows[r] : 0);
  };
  int64_t cur = index_at(lane), next = index_at(32 + lane);
  int64_t i = 0;  // rows this warp has issued
  for (int64_t r = first; r < n_rows; r += step, ++i) {
    if (i > 0 && i % 32 == 0) {
      cur = next;
      next = index_at(i + 32 + lane);
    }
    const int64_t row = __shfl_sync(0xffffffffu, cur, static_cast<int>(i % 32));
    const int slot = static_cast<int>(i % kDepth);
    uint8_t* dst = ring + slot * kRowBytes;
    if (i >= kDepth) {  // the slot's previous row: landed, then one word of it read
      if constexpr (kBulk) {
        wait_parity(&bars[warp][slot], static_cast<uint32_t>((i / kDepth - 1) & 1));
      } else {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(kDepth - 1) : "memory");
        __syncwarp();
      }
      acc ^= *reinterpret_cast<const uint32_t*>(dst + 4 * lane);
      __syncwarp();
    }
    const uint8_t* src = base + row * kRowBytes;
    if constexpr (kBulk) {
      if (lane == 0) {
        (void)cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta,
                                                   cuda::ptx::space_shared, &bars[warp][slot],
                                                   kRowBytes);
        cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, dst, src,
                                 kRowBytes, &bars[warp][slot]);
      }
    } else {
      for (int p = lane; p < kPieces; p += 32) {
        const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst + 16 * p));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src + 16 * p)
                     : "memory");
      }
      asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
  }
  // Every copy landed before the CTA leaves.
  if constexpr (kBulk) {
    if (lane == 0) {
      for (int s = 0; s < kDepth && s < i; ++s) {
        const int64_t last = s + kDepth * ((i - 1 - s) / kDepth);
        wait_parity(&bars[warp][s], static_cast<uint32_t>((last / kDepth) & 1));
      }
    }
  } else {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
  }
  __syncwarp();
  if (acc == 0x12345678u) sink[0] = acc;  // keeps the reads
}

template <int kBulk, int kDepth>
int run(int sms, int warps, double span_gb, const uint8_t* pool, size_t pool_bytes,
        const int64_t* rows, int64_t n_rows, uint32_t* sink) {
  const size_t smem = size_t{kDepth} * warps * kRowBytes;
  if (smem > 200 * 1024) return 0;
  CHECK(cudaFuncSetAttribute(copy_rows<kBulk, kDepth>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem)));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  float best[2] = {1e30f, 1e30f};
  for (int order = 0; order < 2; ++order) {
    for (int rep = 0; rep < 6; ++rep) {
      // Each run shifts the rows (nothing from the previous run's L2).
      const size_t shift =
          order == 0 ? size_t{1009} * 16 * rep * kRowBytes : size_t(rep % 40) * n_rows * kRowBytes;
      const uint8_t* base = pool + shift % (pool_bytes / 2) / 16 * 16;
      CHECK(cudaEventRecord(start));
      copy_rows<kBulk, kDepth>
          <<<sms, warps * 32, smem>>>(base, order == 0 ? rows : nullptr, n_rows, sink);
      CHECK(cudaGetLastError());
      CHECK(cudaEventRecord(stop));
      CHECK(cudaEventSynchronize(stop));
      float t = 0;
      CHECK(cudaEventElapsedTime(&t, start, stop));
      if (rep > 0 && t < best[order]) best[order] = t;
    }
  }
  const double bytes = static_cast<double>(n_rows) * kRowBytes;
  std::printf("%-9s %-6.2f %-6d %-6d %12.0f %12.0f\n", kBulk ? "bulk" : "cp.async", span_gb, warps,
              kDepth, bytes / best[0] / 1e6, bytes / best[1] / 1e6);
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return 0;
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
  // Random rows from the whole pool (half of it, the runs shift the base) or from 688 MB, the
  // cache of the sparse benchmarks at batch 128 and 8192 tokens a request.
  const uint64_t spans[2] = {pool_bytes / 2 / kRowBytes, uint64_t{128} * 8192};
  int64_t* rows[2] = {nullptr, nullptr};
  std::mt19937_64 rng(7);
  std::vector<int64_t> host(n_rows);
  for (int k = 0; k < 2; ++k) {
    CHECK(cudaMalloc(&rows[k], n_rows * 8));
    for (int64_t& r : host) r = static_cast<int64_t>(rng() % spans[k]);
    CHECK(cudaMemcpy(rows[k], host.data(), n_rows * 8, cudaMemcpyHostToDevice));
  }
  std::printf("%s, %d SMs, one CTA an SM; %lld rows of %d bytes a run\n", prop.name, sms,
              static_cast<long long>(n_rows), kRowBytes);
  std::printf("%-9s %-6s %-6s %-6s %12s %12s\n", "copy", "span", "warps", "rows", "random GB/s",
              "in-order GB/s");
  for (int k = 0; k < 2; ++k) {
    const double span_gb = static_cast<double>(spans[k]) * kRowBytes / 1e9;
    for (const int warps : {4, 8, 16, 32}) {
      if (run<0, 4>(sms, warps, span_gb, pool, pool_bytes, rows[k], n_rows, sink) != 0) return 1;
      if (run<0, 8>(sms, warps, span_gb, pool, pool_bytes, rows[k], n_rows, sink) != 0) return 1;
      if (run<0, 16>(sms, warps, span_gb, pool, pool_bytes, rows[k], n_rows, sink) != 0) return 1;
      if (run<1, 8>(sms, warps, span_gb, pool, pool_bytes, rows[k], n_rows, sink) != 0) return 1;
    }
  }
  return 0;
}
