// Microbenchmark: the ways a sparse-decode producer can gather random 656-byte rows (the V3.2
// cache's tokens), against the same bytes in order. W warps an SM each keep D rows in flight:
//   cp.async  one CTA an SM, every lane copies 16-byte pieces (cp.async.cg) into a ring of its
//             warp's in shared memory, one commit group a row;
//   bulk      the same, lane 0 issuing one cp.async.bulk a row, completing on the slot's mbarrier;
//   cp+pf     cp.async, and each lane prefetching into L2 (cp.async.bulk.prefetch.L2) the row it
//             holds for the warp's next batch of 32 (16-47 rows ahead);
//   ld        1-8 CTAs of 8 warps an SM, plain 16-byte loads into registers
//             (ld.global.nc.L1::no_allocate), D rows' loads issued before any is used.
// Before a ring slot is reused its row is waited for and one word of it read. Each warp reads its
// row numbers 32 rows ahead, as the decode kernels read their slots ahead. Each rate times 8
// back-to-back launches (a launch's own overhead is not in it), best of 5.
// On an H200 (2026-11-29, bench/results/2026-11-29-h200-gather-ceiling, calls 1-3), rows of the
// sparse benchmarks' batch 128 x topk 2048 (262144 a launch), TB/s random (in order):
//   cp.async  8 warps 3.1-3.3 (3.5), 16 and 32 warps 3.3-3.5 (3.7-3.8): a warp's copies stream at
//             a fixed rate whatever its depth;
//   bulk 2.6-2.9, cp+pf 2.0-2.7: the TMA unit's per-operation cost at 656 bytes;
//   ld        8 warps x 16 rows 3.6-3.7, 16-64 warps x 4-8 rows 3.5-3.9 (4.0-4.2); over 4x the
//             rows 4.0-4.3 (4.3-4.5): the ramp and tail of a launch cost ~3 us;
//   at batch 64's size (131072 rows) 3.3-3.7 (ld, 16-64 warps x 4-8).
// So a random gather of 656-byte rows reads at most ~77-86% of the 4.6 TB/s read stream at these
// sizes (72-80% at batch 64's), and only by plain loads with ~40 KB in flight an SM.
// Build and run on an sm_90a GPU (~13 GB of device memory):
//   nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -o gather_copy_rate \
//     bench/micro/gather_copy_rate.cu && ./gather_copy_rate
// Prints, per mechanism, warps an SM and rows in flight a warp: GB/s random and in order.
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
constexpr int kLaunches =
    8;  // back-to-back launches a timing (one launch's overhead is not in a rate)

__device__ __forceinline__ void wait_parity(uint64_t* bar, uint32_t parity) {
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, parity)) {
  }
}

// kBulk: 0 cp.async, 1 cp.async.bulk, 2 cp.async with L2 prefetches ahead. rows null: row r is the
// r-th of the pool in order.
template <int kBulk, int kDepth>
__global__ void copy_rows(const uint8_t* base, const int64_t* rows, int64_t n_rows,
                          uint32_t* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t bars[kMaxWarps][kDepth];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  uint8_t* ring = smem + warp * kDepth * kRowBytes;
  if (kBulk == 1 && lane == 0) {
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
    // kBulk 2: cp.async, and each lane prefetches into L2 the row it holds for the next batch
    // (32-63 rows ahead), once its number has landed (the batch after it is loaded).
    if (kBulk == 2 && i % 32 == 16 && first + (i + 16 + lane) * step < n_rows) {
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(base + next * kRowBytes),
                   "r"(kRowBytes)
                   : "memory");
    }
    const int64_t row = __shfl_sync(0xffffffffu, cur, static_cast<int>(i % 32));
    const int slot = static_cast<int>(i % kDepth);
    uint8_t* dst = ring + slot * kRowBytes;
    if (i >= kDepth) {  // the slot's previous row: landed, then one word of it read
      if constexpr (kBulk == 1) {
        wait_parity(&bars[warp][slot], static_cast<uint32_t>((i / kDepth - 1) & 1));
      } else {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(kDepth - 1) : "memory");
        __syncwarp();
      }
      acc ^= *reinterpret_cast<const uint32_t*>(dst + 4 * lane);
      __syncwarp();
    }
    const uint8_t* src = base + row * kRowBytes;
    if constexpr (kBulk == 1) {
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
  if constexpr (kBulk == 1) {
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

// Times launch(base, rows) for random rows (order 0) and the same bytes in order (1): the best of
// 5 timings (after one warm-up) of kLaunches back-to-back launches, each on rows shifted so that
// nothing comes from the previous launch's L2. Prints the mechanism's row: GB/s random and in
// order.
template <typename Launch>
int time_and_print(const char* name, double span_gb, int warps, int depth, const uint8_t* pool,
                   size_t pool_bytes, const int64_t* rows, int64_t n_rows, Launch launch) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  float best[2] = {1e30f, 1e30f};
  for (int order = 0; order < 2; ++order) {
    for (int rep = 0; rep < 6; ++rep) {
      CHECK(cudaEventRecord(start));
      for (int l = 0; l < kLaunches; ++l) {
        const int run = rep * kLaunches + l;
        const size_t shift =
            order == 0 ? size_t{1009} * 16 * run * kRowBytes : size_t(run % 8) * n_rows * kRowBytes;
        launch(pool + shift % (pool_bytes / 2) / 16 * 16, order == 0 ? rows : nullptr);
        CHECK(cudaGetLastError());
      }
      CHECK(cudaEventRecord(stop));
      CHECK(cudaEventSynchronize(stop));
      float t = 0;
      CHECK(cudaEventElapsedTime(&t, start, stop));
      if (rep > 0 && t / kLaunches < best[order]) best[order] = t / kLaunches;
    }
  }
  const double bytes = static_cast<double>(n_rows) * kRowBytes;
  std::printf("%-9s %-6.2f %-6d %-6d %12.0f %12.0f\n", name, span_gb, warps, depth,
              bytes / best[0] / 1e6, bytes / best[1] / 1e6);
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return 0;
}

template <int kBulk, int kDepth>
int run(int sms, int warps, double span_gb, const uint8_t* pool, size_t pool_bytes,
        const int64_t* rows, int64_t n_rows, uint32_t* sink) {
  const size_t smem = size_t{kDepth} * warps * kRowBytes;
  if (smem > 200 * 1024) return 0;
  CHECK(cudaFuncSetAttribute(copy_rows<kBulk, kDepth>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem)));
  const char* name = kBulk == 1 ? "bulk" : kBulk == 2 ? "cp+pf" : "cp.async";
  return time_and_print(name, span_gb, warps, kDepth, pool, pool_bytes, rows, n_rows,
                        [&](const uint8_t* base, const int64_t* r) {
                          copy_rows<kBulk, kDepth>
                              <<<sms, warps * 32, smem>>>(base, r, n_rows, sink);
                        });
}

// Plain 16-byte loads into registers (ld.global.nc.L1::no_allocate), many CTAs an SM: a row's 41
// pieces over the warp's lanes (lanes 0..8 take two), kUnroll rows' loads issued before any is
// used. Row numbers as in copy_rows (32 at a time, a batch ahead).
template <int kUnroll>
__global__ void load_rows(const uint8_t* base, const int64_t* rows, int64_t n_rows,
                          uint32_t* sink) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warps_total = int64_t{gridDim.x} * (blockDim.x / 32);
  const int64_t first = int64_t{blockIdx.x} * (blockDim.x / 32) + threadIdx.x / 32;
  const auto index_at = [&](int64_t k) -> int64_t {
    const int64_t r = first + k * warps_total;
    return rows == nullptr ? r : (r < n_rows ? rows[r] : 0);
  };
  uint32_t acc = 0;
  int64_t cur = index_at(lane), next = index_at(32 + lane);
  int64_t i = 0;
  for (int64_t r = first; r < n_rows; r += kUnroll * warps_total, i += kUnroll) {
    uint4 a[kUnroll], b[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = i + u;
      if (k > 0 && k % 32 == 0) {
        cur = next;
        next = index_at(k + 32 + lane);
      }
      const int64_t row = __shfl_sync(0xffffffffu, cur, static_cast<int>(k % 32));
      const bool live = r + u * warps_total < n_rows;
      const uint4* src = reinterpret_cast<const uint4*>(base + row * kRowBytes);
      a[u] = make_uint4(0, 0, 0, 0);
      b[u] = make_uint4(0, 0, 0, 0);
      if (live) {
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(a[u].x), "=r"(a[u].y), "=r"(a[u].z), "=r"(a[u].w)
                     : "l"(src + lane));
        if (lane < kPieces - 32) {
          asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                       : "=r"(b[u].x), "=r"(b[u].y), "=r"(b[u].z), "=r"(b[u].w)
                       : "l"(src + 32 + lane));
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      acc ^= a[u].x ^ a[u].y ^ a[u].z ^ a[u].w ^ b[u].x ^ b[u].y ^ b[u].z ^ b[u].w;
    }
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

template <int kUnroll>
int run_loads(int sms, int ctas_per_sm, double span_gb, const uint8_t* pool, size_t pool_bytes,
              const int64_t* rows, int64_t n_rows, uint32_t* sink) {
  constexpr int kThreads = 256;
  return time_and_print("ld", span_gb, ctas_per_sm * kThreads / 32, kUnroll, pool, pool_bytes, rows,
                        n_rows, [&](const uint8_t* base, const int64_t* r) {
                          load_rows<kUnroll>
                              <<<sms * ctas_per_sm, kThreads>>>(base, r, n_rows, sink);
                        });
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
  const int64_t n_long = 4 * n_rows;  // the plain loads also over 4x the rows (~690 MB a run)
  std::vector<int64_t> host(n_long);
  for (int k = 0; k < 2; ++k) {
    CHECK(cudaMalloc(&rows[k], n_long * 8));
    for (int64_t& r : host) r = static_cast<int64_t>(rng() % spans[k]);
    CHECK(cudaMemcpy(rows[k], host.data(), n_long * 8, cudaMemcpyHostToDevice));
  }
  std::printf("%s, %d SMs, cp.async and bulk one CTA an SM, ld 2-8; %lld rows of %d bytes a run\n",
              prop.name, sms, static_cast<long long>(n_rows), kRowBytes);
  std::printf("%-9s %-6s %-6s %-6s %12s %12s\n", "copy", "span", "warps", "rows", "random GB/s",
              "in-order GB/s");
  for (int k = 0; k < 2; ++k) {
    const double span_gb = static_cast<double>(spans[k]) * kRowBytes / 1e9;
    for (const int warps : {4, 8, 16, 32}) {
      if (run<0, 4>(sms, warps, span_gb, pool, pool_bytes, rows[k], n_rows, sink) != 0) return 1;
      if (run<0, 8>(sms, warps, span_gb, pool, pool_bytes, rows[k], n_rows, sink) != 0) return 1;
      if (run<0, 16>(sms, warps, span_gb, pool, pool_bytes, rows[k], n_rows, sink) != 0) return 1;
      if (run<1, 8>(sms, warps, span_gb, pool, pool_bytes, rows[k], n_rows, sink) != 0) return 1;
      if (run<2, 4>(sms, warps, span_gb, pool, pool_bytes, rows[k], n_rows, sink) != 0) return 1;
      if (run<2, 8>(sms, warps, span_gb, pool, pool_bytes, rows[k], n_rows, sink) != 0) return 1;
    }
    // Plain loads, 8-64 warps an SM (1-8 CTAs of 8 warps), 2-16 rows in flight a warp.
    if (run_loads<16>(sms, 1, span_gb, pool, pool_bytes, rows[k], n_rows, sink) != 0) return 1;
    for (const int ctas : {1, 2, 4, 8}) {
      if (run_loads<2>(sms, ctas, span_gb, pool, pool_bytes, rows[k], n_rows, sink) != 0) return 1;
      if (run_loads<4>(sms, ctas, span_gb, pool, pool_bytes, rows[k], n_rows, sink) != 0) return 1;
      if (run_loads<8>(sms, ctas, span_gb, pool, pool_bytes, rows[k], n_rows, sink) != 0) return 1;
    }
    std::printf("the plain loads over %lld rows:\n", static_cast<long long>(n_long));
    for (const int ctas : {4, 8}) {
      if (run_loads<4>(sms, ctas, span_gb, pool, pool_bytes, rows[k], n_long, sink) != 0) return 1;
    }
    std::printf("over %lld rows (batch 64 x topk 2048):\n", static_cast<long long>(n_rows / 2));
    if (run<0, 4>(sms, 8, span_gb, pool, pool_bytes, rows[k], n_rows / 2, sink) != 0) return 1;
    if (run<0, 4>(sms, 16, span_gb, pool, pool_bytes, rows[k], n_rows / 2, sink) != 0) return 1;
    for (const int ctas : {1, 2, 4, 8}) {
      if (run_loads<4>(sms, ctas, span_gb, pool, pool_bytes, rows[k], n_rows / 2, sink) != 0) {
        return 1;
      }
      if (run_loads<8>(sms, ctas, span_gb, pool, pool_bytes, rows[k], n_rows / 2, sink) != 0) {
        return 1;
      }
    }
  }
  return 0;
}
