// Warpgroup MMA (wgmma, sm_90a) for the sm90 decode kernel: shared-memory matrix descriptors and
// the instruction shapes the kernels issue, with fp32 accumulators:
//   m64n64k16,  B K-major:  S = Q K^T over a 64-token block (by the warpgroup that owns it);
//   m64n256k16, B MN-major: O += P V, one warpgroup's 256 of the 512 output columns (V is stored
//                           token-major, columns contiguous, so B is transposed); A (P) from
//                           shared memory or, for the warpgroup that computed P, registers;
//   m64n16k16 / m64n32k16, A and B from shared memory (the narrow tile for up to 32 query rows):
//                           S^T = K Q^T (A K-major) and O^T += V^T P^T (A = V, MN-major).
// CCCL's cuda::ptx has no wgmma.mma_async; these are the only hand-written forms. The accumulator
// of m64nNk16 in thread t of the warpgroup: d[i] is row 16 * (t / 32) + (t % 32) / 4 +
// 8 * ((i / 2) % 2), column 8 * (i / 4) + 2 * (t % 4) + i % 2.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace mlakit::sm90 {

// Shared-memory matrix descriptor with the 128-byte swizzle (PTX ISA, "Matrix Descriptor
// Format"): start address, leading and stride byte offsets (all >> 4) and layout type 1. The tile
// is made of 1024-byte atoms of 8 rows x 128 bytes, 1024-aligned, 16-byte chunk c of row r stored
// at chunk c ^ (r % 8) (what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B).
//  - K-major (rows are M or N, 64 elements of K per row): sbo is the distance between 8-row
//    groups (1024 here); lbo is unused. The k-th 16-element step starts 32 * k bytes further.
//  - MN-major (rows are K, 64 elements of M or N per row): lbo is the distance between 64-element
//    column blocks, sbo the distance between 8-row (8 K) groups.
__device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t smem_addr, uint32_t lbo,
                                                    uint32_t sbo) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4) |
         (static_cast<uint64_t>((lbo & 0x3FFFFu) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFFu) >> 4) << 32) | (uint64_t{1} << 62);
}

// The same with the 64-byte swizzle (layout type 2): atoms of 8 rows x 64 bytes (512 bytes),
// 16-byte chunk c of row r at chunk c ^ ((r / 2) % 4), what TMA writes with
// CU_TENSOR_MAP_SWIZZLE_64B. K-major only here (the fp8 tiles: 64 e4m3 of K per row), sbo the
// distance between 8-row groups (512).
__device__ __forceinline__ uint64_t smem_desc_sw64(uint32_t smem_addr, uint32_t sbo) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFFu) >> 4) << 32) | (uint64_t{2} << 62);
}

// The descriptor of the same tile `bytes` further on: the start address field holds address >> 4
// in 14 bits (18-bit addresses), and every shared-memory address stays below 2^18, so adding to
// the low bits never carries into the other fields. Lets a loop of wgmmas step a descriptor
// built once instead of building each one.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MLAKIT_SM90_WGMMA 1
#endif

// wgmma.fence.sync.aligned: orders register accesses to accumulators before the next wgmma.
__device__ __forceinline__ void wgmma_fence() {
#ifdef MLAKIT_SM90_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

// wgmma.commit_group.sync.aligned: the wgmmas issued since the last commit form one group.
__device__ __forceinline__ void wgmma_commit_group() {
#ifdef MLAKIT_SM90_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

// wgmma.wait_group.sync.aligned N: at most N groups of this warpgroup are still pending.
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
#ifdef MLAKIT_SM90_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

// Keeps the compiler from moving accumulator reads or writes across the asynchronous MMA.
template <int N>
__device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The 32 accumulator operands %0..%31, then %32 desc_a, %33 desc_b, %34 scale_d.
#define MLAKIT_WGMMA_N64_REGS                                               \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define MLAKIT_WGMMA_N64_OUTPUTS                                                                  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// The 64 accumulator operands %0..%63, then %64 desc_a, %65 desc_b, %66 scale_d.
#define MLAKIT_WGMMA_N128_REGS                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
#define MLAKIT_WGMMA_N128_OUTPUTS                                                                 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// The 128 accumulator operands %0..%127, then %128 desc_a, %129 desc_b, %130 scale_d.
#define MLAKIT_WGMMA_N256_REGS                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "  \
  "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "  \
  "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "    \
  "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, "  \
  "%123, %124, %125, %126, %127}, "
#define MLAKIT_WGMMA_N256_OUTPUTS                                                                 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),  \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),  \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),  \
      "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),  \
      "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),  \
      "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),  \
      "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),          \
      "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]),         \
      "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),         \
      "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]),         \
      "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define MLAKIT_WGMMA_SCALE_D(n) "{\n.reg .pred p;\nsetp.ne.b32 p, %" #n ", 0;\n"

// wgmma.mma_async.sync.aligned.m64n64k16.f32.{bf16,f16} d, desc_a, desc_b, p, 1, 1, 0, 0
// (sm_90a): d = A B + (scale_d ? d : 0), both K-major.
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                int scale_d) {
#ifdef MLAKIT_SM90_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        MLAKIT_WGMMA_SCALE_D(
            34) "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " MLAKIT_WGMMA_N64_REGS
                "%32, %33, p, 1, 1, 0, 0;\n}\n"
        : MLAKIT_WGMMA_N64_OUTPUTS
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  } else {
    static_assert(std::is_same_v<T, __half>);
    asm volatile(MLAKIT_WGMMA_SCALE_D(
                     34) "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " MLAKIT_WGMMA_N64_REGS
                         "%32, %33, p, 1, 1, 0, 0;\n}\n"
                 : MLAKIT_WGMMA_N64_OUTPUTS
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
#endif
}

// wgmma.mma_async.sync.aligned.m64n256k16.f32.{bf16,f16} d, desc_a, desc_b, p, 1, 1, 0, 1
// (sm_90a): d = A B + (scale_d ? d : 0), A K-major, B MN-major (transposed).
template <typename T>
__device__ __forceinline__ void wgmma_m64n256k16_tb(float (&d)[128], uint64_t desc_a,
                                                    uint64_t desc_b, int scale_d) {
#ifdef MLAKIT_SM90_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        MLAKIT_WGMMA_SCALE_D(
            130) "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " MLAKIT_WGMMA_N256_REGS
                 "%128, %129, p, 1, 1, 0, 1;\n}\n"
        : MLAKIT_WGMMA_N256_OUTPUTS
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  } else {
    static_assert(std::is_same_v<T, __half>);
    asm volatile(
        MLAKIT_WGMMA_SCALE_D(
            130) "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " MLAKIT_WGMMA_N256_REGS
                 "%128, %129, p, 1, 1, 0, 1;\n}\n"
        : MLAKIT_WGMMA_N256_OUTPUTS
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
#endif
}

// wgmma.mma_async.sync.aligned.m64n256k16.f32.{bf16,f16} d, {a0..a3}, desc_b, p, 1, 1, 1
// (sm_90a): d = A B + (scale_d ? d : 0), A from registers (the m64k16 fragment: a[0] row r cols
// c, c+1; a[1] row r+8; a[2] row r cols c+8, c+9; a[3] row r+8, with r = 16 (t / 32) + (t % 32) / 4
// and c = 2 (t % 4), two 16-bit values per register), B MN-major (transposed).
template <typename T>
__device__ __forceinline__ void wgmma_m64n256k16_rs_tb(float (&d)[128], const uint32_t (&a)[4],
                                                       uint64_t desc_b, int scale_d) {
#ifdef MLAKIT_SM90_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        MLAKIT_WGMMA_SCALE_D(
            133) "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " MLAKIT_WGMMA_N256_REGS
                 "{%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        : MLAKIT_WGMMA_N256_OUTPUTS
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  } else {
    static_assert(std::is_same_v<T, __half>);
    asm volatile(
        MLAKIT_WGMMA_SCALE_D(
            133) "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " MLAKIT_WGMMA_N256_REGS
                 "{%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        : MLAKIT_WGMMA_N256_OUTPUTS
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
#endif
}

// As wgmma_m64n256k16_tb with N 128 (d: 64 accumulators).
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16_tb(float (&d)[64], uint64_t desc_a,
                                                    uint64_t desc_b, int scale_d) {
#ifdef MLAKIT_SM90_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        MLAKIT_WGMMA_SCALE_D(
            66) "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " MLAKIT_WGMMA_N128_REGS
                "%64, %65, p, 1, 1, 0, 1;\n}\n"
        : MLAKIT_WGMMA_N128_OUTPUTS
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  } else {
    static_assert(std::is_same_v<T, __half>);
    asm volatile(
        MLAKIT_WGMMA_SCALE_D(
            66) "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " MLAKIT_WGMMA_N128_REGS
                "%64, %65, p, 1, 1, 0, 1;\n}\n"
        : MLAKIT_WGMMA_N128_OUTPUTS
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
#endif
}

// As wgmma_m64n256k16_rs_tb with N 128 (d: 64 accumulators).
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16_rs_tb(float (&d)[64], const uint32_t (&a)[4],
                                                       uint64_t desc_b, int scale_d) {
#ifdef MLAKIT_SM90_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        MLAKIT_WGMMA_SCALE_D(
            69) "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " MLAKIT_WGMMA_N128_REGS
                "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : MLAKIT_WGMMA_N128_OUTPUTS
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  } else {
    static_assert(std::is_same_v<T, __half>);
    asm volatile(
        MLAKIT_WGMMA_SCALE_D(
            69) "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " MLAKIT_WGMMA_N128_REGS
                "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : MLAKIT_WGMMA_N128_OUTPUTS
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
#endif
}

// The narrow tile's operands (N 16: %0..%7, then %8 desc_a, %9 desc_b, %10 scale_d, %11 the A
// transpose; N 32: %0..%15, then %16..%19).
#define MLAKIT_WGMMA_N16_TAIL "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, %11, 0;\n}\n"
#define MLAKIT_WGMMA_N16_OUTPUTS \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define MLAKIT_WGMMA_N32_TAIL                                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, " \
  "%19, 0;\n}\n"
#define MLAKIT_WGMMA_N32_OUTPUTS                                                                  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15])

// wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16} d, desc_a, desc_b, p, 1, 1, kTransA, 0
// (sm_90a), N 16 or 32: d = A B + (scale_d ? d : 0), B K-major, A K-major (kTransA 0) or MN-major
// (1). The narrow tile's two products (config.h): S^T = K Q^T and O^T += V^T P^T.
template <typename T, int N, int kTransA>
__device__ __forceinline__ void wgmma_m64nNk16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                               int scale_d) {
  static_assert(N == 16 || N == 32);
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  static_assert(kBf16 || std::is_same_v<T, __half>);
#ifdef MLAKIT_SM90_WGMMA
  if constexpr (N == 16 && kBf16) {
    asm volatile(MLAKIT_WGMMA_SCALE_D(10) "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
                 MLAKIT_WGMMA_N16_TAIL:MLAKIT_WGMMA_N16_OUTPUTS
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA));
  } else if constexpr (N == 16) {
    asm volatile(MLAKIT_WGMMA_SCALE_D(10) "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
                 MLAKIT_WGMMA_N16_TAIL:MLAKIT_WGMMA_N16_OUTPUTS
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA));
  } else if constexpr (kBf16) {
    asm volatile(MLAKIT_WGMMA_SCALE_D(18) "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                 MLAKIT_WGMMA_N32_TAIL:MLAKIT_WGMMA_N32_OUTPUTS
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA));
  } else {
    asm volatile(MLAKIT_WGMMA_SCALE_D(18) "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
                 MLAKIT_WGMMA_N32_TAIL:MLAKIT_WGMMA_N32_OUTPUTS
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA));
  }
#endif
}

// The narrow tile's products with A from registers: N 16: %0..%7, then %8..%11 the A fragment,
// %12 desc_b, %13 scale_d; N 32: %0..%15, then %16..%19, %20, %21.
#define MLAKIT_WGMMA_RS_N16_TAIL \
  "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1"
#define MLAKIT_WGMMA_RS_N32_TAIL                                                             \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, " \
  "%19}, %20, p, 1, 1"
#define MLAKIT_WGMMA_A_INPUTS "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3])

// wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16} d, {a0..a3}, desc_b, p, 1, 1, 0 (sm_90a),
// N 16 or 32: d = A B + (scale_d ? d : 0), A from registers (the m64k16 fragment of
// wgmma_m64n256k16_rs_tb), B K-major. The fp8 narrow tile with a 16-bit q: S^T = K Q^T and
// O^T += V^T P^T with K and V^T widened from e4m3 in registers.
template <typename T, int N>
__device__ __forceinline__ void wgmma_m64nNk16_rs(float (&d)[N / 2], const uint32_t (&a)[4],
                                                  uint64_t desc_b, int scale_d) {
  static_assert(N == 16 || N == 32);
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  static_assert(kBf16 || std::is_same_v<T, __half>);
#ifdef MLAKIT_SM90_WGMMA
  if constexpr (N == 16 && kBf16) {
    asm volatile(
        MLAKIT_WGMMA_SCALE_D(
            13) "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 " MLAKIT_WGMMA_RS_N16_TAIL
                ", 0;\n}\n"
        : MLAKIT_WGMMA_N16_OUTPUTS
        : MLAKIT_WGMMA_A_INPUTS, "l"(desc_b), "r"(scale_d));
  } else if constexpr (N == 16) {
    asm volatile(
        MLAKIT_WGMMA_SCALE_D(
            13) "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 " MLAKIT_WGMMA_RS_N16_TAIL
                ", 0;\n}\n"
        : MLAKIT_WGMMA_N16_OUTPUTS
        : MLAKIT_WGMMA_A_INPUTS, "l"(desc_b), "r"(scale_d));
  } else if constexpr (kBf16) {
    asm volatile(
        MLAKIT_WGMMA_SCALE_D(
            21) "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " MLAKIT_WGMMA_RS_N32_TAIL
                ", 0;\n}\n"
        : MLAKIT_WGMMA_N32_OUTPUTS
        : MLAKIT_WGMMA_A_INPUTS, "l"(desc_b), "r"(scale_d));
  } else {
    asm volatile(
        MLAKIT_WGMMA_SCALE_D(
            21) "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 " MLAKIT_WGMMA_RS_N32_TAIL
                ", 0;\n}\n"
        : MLAKIT_WGMMA_N32_OUTPUTS
        : MLAKIT_WGMMA_A_INPUTS, "l"(desc_b), "r"(scale_d));
  }
#endif
}

// wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3 d, desc_a, desc_b, p, 1, 1 (sm_90a), N 16
// or 32: d = A B + (scale_d ? d : 0), both K-major (8-bit types have no transposed forms). The
// fp8 narrow tile's S^T = K Q^T with q and the cache in e4m3.
template <int N>
__device__ __forceinline__ void wgmma_m64nNk32_e4m3(float (&d)[N / 2], uint64_t desc_a,
                                                    uint64_t desc_b, int scale_d) {
  static_assert(N == 16 || N == 32);
#ifdef MLAKIT_SM90_WGMMA
  if constexpr (N == 16) {
    asm volatile(MLAKIT_WGMMA_SCALE_D(10) "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n}\n"
                 : MLAKIT_WGMMA_N16_OUTPUTS
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  } else {
    asm volatile(MLAKIT_WGMMA_SCALE_D(18) "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, "
                 "%17, p, 1, 1;\n}\n"
                 : MLAKIT_WGMMA_N32_OUTPUTS
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
#endif
}

// wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3 d, {a0..a3}, desc_b, p, 1, 1 (sm_90a), N 16
// or 32: A from registers, the m64k32 fragment of 8-bit types in thread t of the warpgroup: a[0]
// row r, k 4q .. 4q + 3 (byte i = k 4q + i); a[1] row r + 8; a[2] row r, k 16 + 4q ..; a[3] row
// r + 8, k 16 + 4q .., with r = 16 (t / 32) + (t % 32) / 4 and q = t % 4. B K-major. The fp8
// narrow tile's O^T += V^T P^T (V^T byte-transposed in registers).
template <int N>
__device__ __forceinline__ void wgmma_m64nNk32_e4m3_rs(float (&d)[N / 2], const uint32_t (&a)[4],
                                                       uint64_t desc_b, int scale_d) {
  static_assert(N == 16 || N == 32);
#ifdef MLAKIT_SM90_WGMMA
  if constexpr (N == 16) {
    asm volatile(
        MLAKIT_WGMMA_SCALE_D(
            13) "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 " MLAKIT_WGMMA_RS_N16_TAIL
                ";\n}\n"
        : MLAKIT_WGMMA_N16_OUTPUTS
        : MLAKIT_WGMMA_A_INPUTS, "l"(desc_b), "r"(scale_d));
  } else {
    asm volatile(
        MLAKIT_WGMMA_SCALE_D(
            21) "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 " MLAKIT_WGMMA_RS_N32_TAIL
                ";\n}\n"
        : MLAKIT_WGMMA_N32_OUTPUTS
        : MLAKIT_WGMMA_A_INPUTS, "l"(desc_b), "r"(scale_d));
  }
#endif
}

// wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 d, desc_a, desc_b, p, 1, 1 (sm_90a):
// d = A B + (scale_d ? d : 0), both K-major. The fp8 wide tile's S = Q K^T.
__device__ __forceinline__ void wgmma_m64n64k32_e4m3(float (&d)[32], uint64_t desc_a,
                                                     uint64_t desc_b, int scale_d) {
#ifdef MLAKIT_SM90_WGMMA
  asm volatile(MLAKIT_WGMMA_SCALE_D(
                   34) "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " MLAKIT_WGMMA_N64_REGS
                       "%32, %33, p, 1, 1;\n}\n"
               : MLAKIT_WGMMA_N64_OUTPUTS
               : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#endif
}

// wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 d, {a0..a3}, desc_b, p, 1, 1 (sm_90a):
// A from registers (the 8-bit m64k32 fragment of wgmma_m64nNk32_e4m3_rs), B K-major. The in-step
// wide tile's O^T += V^T P^T (decode_fp8_instep.cuh).
__device__ __forceinline__ void wgmma_m64n64k32_e4m3_rs(float (&d)[32], const uint32_t (&a)[4],
                                                        uint64_t desc_b, int scale_d) {
#ifdef MLAKIT_SM90_WGMMA
  asm volatile(MLAKIT_WGMMA_SCALE_D(
                   37) "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " MLAKIT_WGMMA_N64_REGS
                       "{%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
               : MLAKIT_WGMMA_N64_OUTPUTS
               : MLAKIT_WGMMA_A_INPUTS, "l"(desc_b), "r"(scale_d));
#endif
}

// wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 d, desc_a, desc_b, p, 1, 1 (sm_90a):
// d = A B + (scale_d ? d : 0), both K-major. The indexer's products of a key tile and 128 heads.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t desc_a,
                                                      uint64_t desc_b, int scale_d) {
#ifdef MLAKIT_SM90_WGMMA
  asm volatile(
      MLAKIT_WGMMA_SCALE_D(
          66) "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " MLAKIT_WGMMA_N128_REGS
              "%64, %65, p, 1, 1;\n}\n"
      : MLAKIT_WGMMA_N128_OUTPUTS
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#endif
}

// wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 d, {a0..a3}, desc_b, p, 1, 1 (sm_90a):
// as the m64n256 form below for 128 columns. The wide tile with a split q: half of P V into a
// fresh accumulator (Widen::kQSplit).
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_rs(float (&d)[64], const uint32_t (&a)[4],
                                                         uint64_t desc_b, int scale_d) {
#ifdef MLAKIT_SM90_WGMMA
  asm volatile(
      MLAKIT_WGMMA_SCALE_D(
          69) "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " MLAKIT_WGMMA_N128_REGS
              "{%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : MLAKIT_WGMMA_N128_OUTPUTS
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
#endif
}

// wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 d, {a0..a3}, desc_b, p, 1, 1 (sm_90a):
// d = A B + (scale_d ? d : 0), A from registers (the 8-bit m64k32 fragment of
// wgmma_m64nNk32_e4m3_rs), B K-major. The fp8 wide tile's O += P V with V^T in shared memory.
__device__ __forceinline__ void wgmma_m64n256k32_e4m3_rs(float (&d)[128], const uint32_t (&a)[4],
                                                         uint64_t desc_b, int scale_d) {
#ifdef MLAKIT_SM90_WGMMA
  asm volatile(
      MLAKIT_WGMMA_SCALE_D(
          133) "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 " MLAKIT_WGMMA_N256_REGS
               "{%128, %129, %130, %131}, %132, p, 1, 1;\n}\n"
      : MLAKIT_WGMMA_N256_OUTPUTS
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
#endif
}

#undef MLAKIT_WGMMA_RS_N16_TAIL
#undef MLAKIT_WGMMA_RS_N32_TAIL
#undef MLAKIT_WGMMA_A_INPUTS
#undef MLAKIT_WGMMA_SCALE_D
#undef MLAKIT_WGMMA_N16_TAIL
#undef MLAKIT_WGMMA_N16_OUTPUTS
#undef MLAKIT_WGMMA_N32_TAIL
#undef MLAKIT_WGMMA_N32_OUTPUTS
#undef MLAKIT_WGMMA_N64_REGS
#undef MLAKIT_WGMMA_N64_OUTPUTS
#undef MLAKIT_WGMMA_N256_REGS
#undef MLAKIT_WGMMA_N256_OUTPUTS

}  // namespace mlakit::sm90
