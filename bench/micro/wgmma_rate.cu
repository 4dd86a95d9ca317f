// Microbenchmark: cycles per wgmma instruction on one SM for the shapes an MLA decode tile can
// use, with one or two warpgroups issuing at once, to tell whether a schedule is bound by the
// tensor pipe or by shared-memory operand reads. Operands are zeros in shared memory (A from
// registers for the rs_ forms); the 128-byte swizzled layouts of the decode kernel.
// Build and run on an sm_90a GPU:
//   nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -Isrc -o wgmma_rate \
//     bench/micro/wgmma_rate.cu && ./wgmma_rate
// Per (shape of warpgroup 0, shape of warpgroup 1): cycles per instruction of each warpgroup, and
// the shared-memory operand bytes and flops per cycle of the two together. The tensor pipe's peak
// is 4096 dense bf16 flops per cycle and SM (8192 e4m3, the e8_ shapes); shared memory delivers
// 128 bytes per cycle. Recorded: bench/results/2026-11-21-h200-wgmma-rate (bf16),
// bench/results/2026-11-29-h200-fp8-instep call 5 (e4m3).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "backends/sm90/wgmma.cuh"

using mlakit::sm90::smem_desc_sw128;
using mlakit::sm90::smem_desc_sw64;
using mlakit::sm90::wgmma_m64n128k32_e4m3;
using mlakit::sm90::wgmma_m64n256k16_rs_tb;
using mlakit::sm90::wgmma_m64n256k16_tb;
using mlakit::sm90::wgmma_m64n256k32_e4m3_rs;
using mlakit::sm90::wgmma_m64n64k16;
using mlakit::sm90::wgmma_m64n64k32_e4m3;
using mlakit::sm90::wgmma_m64n64k32_e4m3_rs;
using mlakit::sm90::wgmma_m64nNk16;

// The decode kernels' forms come from backends/sm90/wgmma.cuh; the other shapes studied here
// (bf16 in, f32 accumulators) are written out below. ss: A and B from shared memory, rs: A from
// registers; ta: A MN-major.
__device__ __forceinline__ void mma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

__device__ __forceinline__ void mma_ss_n128(float (&d)[64], uint64_t da, uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, %64, %65, 1, 1, 1, 0, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(da), "l"(db));
}

// e8_*: e4m3 in, f32 accumulators, k 32 per instruction, both operands K-major in the 64-byte
// swizzle of the fp8 decode tiles (decode_fp8_wide.cuh, decode_fp8_instep.cuh).
enum Shape {
  kSsN16,
  kSsN16Ta,
  kSsN64,
  kRsN64,
  kSsN128,
  kSsN256Tb,
  kRsN256Tb,
  kE8SsN64,
  kE8RsN64,
  kE8SsN128,
  kE8RsN256,
  kNone
};
constexpr const char* kNames[] = {"ss_n16",    "ss_n16_ta",  "ss_n64",     "rs_n64",
                                  "ss_n128",   "ss_n256_tb", "rs_n256_tb", "e8_ss_n64",
                                  "e8_rs_n64", "e8_ss_n128", "e8_rs_n256", "-"};
constexpr int kN[] = {16, 16, 64, 64, 128, 256, 256, 64, 64, 128, 256, 0};
constexpr bool kRs[] = {false, false, false, true,  false, false,
                        true,  false, true,  false, true,  false};
constexpr bool kE8[] = {false, false, false, false, false, false,
                        false, true,  true,  true,  true,  false};
constexpr int kGroup = 36;  // instructions per commit group (a Q K^T of one 64-token block)
constexpr int kRounds = 64;
constexpr int kABytes = 73728, kBBytes = 131072;

// Shared-memory offset of instruction i's operand: K-major tiles step 32 bytes per k16 within a
// 128-byte row and a chunk of rows x 128 bytes every four; MN-major tiles 16 rows (2 KB) per k16.
__device__ __forceinline__ uint32_t k_major(int i, int rows) {
  return (i / 4) * rows * 128 + (i % 4) * 32;
}
__device__ __forceinline__ uint32_t mn_major(int i) { return (i % 4) * 2048; }

template <int S>
__device__ __forceinline__ void run_shape(uint32_t a_base, uint32_t b_base, long long* cycles) {
  constexpr int n = kN[S];
  float d[n / 2];
#pragma unroll
  for (int i = 0; i < n / 2; ++i) d[i] = 0.0f;
  uint32_t a_regs[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) a_regs[i] = static_cast<uint32_t>(threadIdx.x / 1024 + i);
  const long long t0 = clock64();
  for (int r = 0; r < kRounds; ++r) {
    // Descriptors built in the round (hoisted out of it, 72 of them took the registers the
    // accumulators need and ptxas serialized the wgmmas).
    asm volatile("" : "+r"(a_base), "+r"(b_base));
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      const uint32_t a_at = S == kSsN16Ta ? mn_major(i) : k_major(i % 36, 64);
      const uint32_t b_at = S == kSsN256Tb || S == kRsN256Tb
                                ? mn_major(i)
                                : k_major(i % 36 % (n == 128 ? 32 : 36), n);
      const uint64_t da = smem_desc_sw128(a_base + a_at, 8192, 1024);
      const uint64_t db = smem_desc_sw128(b_base + b_at, 8192, 1024);
      using T = __nv_bfloat16;
      // e4m3: k-step i at 32 bytes within a 64-byte row, a chunk of rows x 64 bytes every two.
      const uint32_t e8_a = (i / 2) % 9 * 64 * 64 + (i % 2) * 32;
      const uint32_t e8_b = (i / 2) % (n == 256 ? 8 : 9) * n * 64 + (i % 2) * 32;  // in kBBytes
      const uint64_t ea = smem_desc_sw64(a_base + e8_a, 512);
      const uint64_t eb = smem_desc_sw64(b_base + e8_b, 512);
      if constexpr (S == kE8SsN64) wgmma_m64n64k32_e4m3(d, ea, eb, 1);
      if constexpr (S == kE8RsN64) wgmma_m64n64k32_e4m3_rs(d, a_regs, eb, 1);
      if constexpr (S == kE8SsN128) wgmma_m64n128k32_e4m3(d, ea, eb, 1);
      if constexpr (S == kE8RsN256) wgmma_m64n256k32_e4m3_rs(d, a_regs, eb, 1);
      if constexpr (S == kSsN16) wgmma_m64nNk16<__nv_bfloat16, 16, 0>(d, da, db, 1);
      if constexpr (S == kSsN16Ta) wgmma_m64nNk16<__nv_bfloat16, 16, 1>(d, da, db, 1);
      if constexpr (S == kSsN64) wgmma_m64n64k16<T>(d, da, db, 1);
      if constexpr (S == kRsN64) mma_rs_n64(d, a_regs, db);
      if constexpr (S == kSsN128) mma_ss_n128(d, da, db);
      if constexpr (S == kSsN256Tb) wgmma_m64n256k16_tb<T>(d, da, db, 1);
      if constexpr (S == kRsN256Tb) wgmma_m64n256k16_rs_tb<T>(d, a_regs, db, 1);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  }
  const long long t1 = clock64();
  float keep = 0.0f;
#pragma unroll
  for (int i = 0; i < n / 2; ++i) keep += d[i];
  if (threadIdx.x % 128 == 0) *cycles = (t1 - t0) + (keep == 1.0f ? 1 : 0);
}

template <int S0, int S1>
__global__ void __launch_bounds__(256, 1) rate_kernel(long long* cycles) {
  extern __shared__ __align__(1024) uint8_t smem[];
  for (int i = threadIdx.x; i < (kABytes + kBBytes) / 16; i += blockDim.x) {
    reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  if (wg == 0) run_shape<S0>(base, base + kABytes, &cycles[0]);
  if constexpr (S1 != kNone) {
    if (wg == 1) run_shape<S1>(base, base + kABytes, &cycles[1]);
  }
}

template <int S0, int S1>
void measure(long long* dev) {
  auto kernel = rate_kernel<S0, S1>;
  const int bytes = kABytes + kBBytes;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  long long host[2] = {0, 0};
  for (int rep = 0; rep < 3; ++rep) {  // the last of three launches (the first ones warm up)
    cudaMemset(dev, 0, 2 * sizeof(long long));
    kernel<<<1, S1 == kNone ? 128 : 256, bytes>>>(dev);
    cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost);
  }
  if (cudaGetLastError() != cudaSuccess) {
    std::printf("%-11s %-11s launch failed\n", kNames[S0], kNames[S1]);
    return;
  }
  const double count = kRounds * kGroup;
  const double per0 = host[0] / count, per1 = S1 == kNone ? 0.0 : host[1] / count;
  // Both warpgroups together, over the longer of their two times (the shorter one idles at its
  // end, so a mixed pair's rates are the pair's, not each shape's alone).
  const double cycles = static_cast<double>(host[0] > host[1] ? host[0] : host[1]);
  // Per instruction: A 64 x 16 bf16 or 64 x 32 e4m3 (2 KB) unless from registers, B N x 32 bytes;
  // k 16 (bf16) or 32 (e4m3).
  auto operand_bytes = [](int s) { return s == kNone ? 0 : (kRs[s] ? 0 : 2048) + kN[s] * 32; };
  auto flops = [](int s) { return s == kNone ? 0.0 : 2.0 * 64 * kN[s] * (kE8[s] ? 32 : 16); };
  const double bw = (operand_bytes(S0) + operand_bytes(S1)) * count / cycles;
  const double fpc = (flops(S0) + flops(S1)) * count / cycles;
  std::printf("%-11s %-11s %8.1f %8.1f %10.1f %10.0f\n", kNames[S0], kNames[S1], per0, per1, bw,
              fpc);
}

int main() {
  long long* dev = nullptr;
  if (cudaMalloc(&dev, 2 * sizeof(long long)) != cudaSuccess) {
    std::printf("no GPU\n");
    return 1;
  }
  std::printf("%-11s %-11s %8s %8s %10s %10s\n", "wg0", "wg1", "cyc/ins0", "cyc/ins1", "smem B/cyc",
              "flop/cyc");
  measure<kSsN16, kNone>(dev);
  measure<kSsN16Ta, kNone>(dev);
  measure<kSsN64, kNone>(dev);
  measure<kRsN64, kNone>(dev);
  measure<kSsN128, kNone>(dev);
  measure<kSsN256Tb, kNone>(dev);
  measure<kRsN256Tb, kNone>(dev);
  measure<kSsN16, kSsN16>(dev);
  measure<kSsN16Ta, kSsN16Ta>(dev);
  measure<kSsN64, kSsN64>(dev);
  measure<kRsN64, kRsN64>(dev);
  measure<kSsN128, kSsN128>(dev);
  measure<kSsN256Tb, kSsN256Tb>(dev);
  measure<kRsN256Tb, kRsN256Tb>(dev);
  measure<kSsN64, kSsN256Tb>(dev);
  measure<kSsN64, kRsN256Tb>(dev);
  measure<kRsN64, kRsN256Tb>(dev);
  // e4m3 (fp8 peak: twice the bf16 flops per cycle).
  measure<kE8SsN64, kNone>(dev);
  measure<kE8RsN64, kNone>(dev);
  measure<kE8SsN128, kNone>(dev);
  measure<kE8RsN256, kNone>(dev);
  measure<kE8SsN64, kE8SsN64>(dev);
  measure<kE8RsN64, kE8RsN64>(dev);
  measure<kE8SsN128, kE8SsN128>(dev);
  measure<kE8RsN256, kE8RsN256>(dev);
  measure<kE8SsN64, kE8RsN256>(dev);
  measure<kE8SsN64, kE8RsN64>(dev);
  return 0;
}
