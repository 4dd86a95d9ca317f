// Small PTX wrappers for the instructions that CCCL's cuda::ptx does not cover (mma.sync,
// ldmatrix, non-bulk cp.async). One function per instruction, named after its mnemonic; each
// comment gives the PTX form and the minimum architecture. A wrong target fails to compile.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "kernels/common/ptx.h needs sm_80 or newer (mma.sync bf16, cp.async)"
#endif

namespace mlakit::ptx {

// The 32-bit shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, d (sm_80)
__device__ __forceinline__ void mma_sync_m16n8k16_f32_bf16(float (&d)[4], const uint32_t (&a)[4],
                                                           uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 d, a, b, d (sm_80)
__device__ __forceinline__ void mma_sync_m16n8k16_f32_f16(float (&d)[4], const uint32_t (&a)[4],
                                                          uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 d, a, b, d (sm_89): d += A B with A
// 16 x 32 and B 32 x 8 of e4m3 (4 values a register). A wrong target traps: a caller checks the
// device before launching (there is no e4m3 mma.sync below sm_89).
__device__ __forceinline__ void mma_sync_m16n8k32_f32_e4m3(float (&d)[4], const uint32_t (&a)[4],
                                                           uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)d, (void)a, (void)b0, (void)b1;
  __trap();
#endif
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16 {r0..r3}, [addr] (sm_75)
__device__ __forceinline__ void ldmatrix_sync_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {r0..r3}, [addr] (sm_75)
__device__ __forceinline__ void ldmatrix_sync_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// movmatrix.sync.aligned.m8n8.trans.b16 d, a (sm_75): the warp's 8 x 8 matrix of 16-bit values
// (lane i holding row i / 4, columns 2 (i % 4) and + 1) transposed, in the same layout.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t a) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
  return d;
}

// ldmatrix.sync.aligned.m8n8.x2.shared.b16 {r0, r1}, [addr] (sm_75); lanes 0-15 give addresses.
__device__ __forceinline__ void ldmatrix_sync_x2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

// cp.async.cg.shared.global [dst], [src], 16, src_bytes (sm_80): copies src_bytes (0 or 16) and
// zero-fills the rest of the 16 bytes; src_bytes 0 reads nothing.
__device__ __forceinline__ void cp_async_cg_shared_global(uint32_t dst, const void* src,
                                                          int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}

// cp.async.mbarrier.arrive.noinc.shared::cta.b64 [bar] (sm_80): an arrival on the mbarrier once
// every cp.async the thread issued before has landed (the barrier's count includes it).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// cp.async.ca.shared.global [dst], [src], 4, src_bytes (sm_80): copies src_bytes (0 or 4)
// and zero-fills the rest of the 4 bytes; src_bytes 0 reads nothing.
__device__ __forceinline__ void cp_async_ca_shared_global_4(uint32_t dst, const void* src,
                                                            int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

// cp.async.commit_group (sm_80)
__device__ __forceinline__ void cp_async_commit_group() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// cp.async.wait_group N (sm_80): at most N of this thread's groups are still pending.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ld.relaxed.gpu.global.b32 d, [a] (sm_70): a strong load at GPU scope; no data race with
// another kernel's writes to `a`, and served from L2 (no line left in L1).
__device__ __forceinline__ int32_t ld_relaxed_gpu_global_b32(const int32_t* a) {
  int32_t d;
  asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];\n" : "=r"(d) : "l"(a) : "memory");
  return d;
}

// ex2.approx.ftz.f32 d, a (sm_75): 2^a, relative error 2^-22; -inf gives +0.
__device__ __forceinline__ float ex2_approx_ftz_f32(float a) {
  float d;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(d) : "f"(a));
  return d;
}

// cp.async.wait_group N for a runtime N in 0..3 (the immediate must be a constant).
__device__ __forceinline__ void cp_async_wait_group_dynamic(int n) {
  switch (n) {
    case 0: cp_async_wait_group<0>(); break;
    case 1: cp_async_wait_group<1>(); break;
    case 2: cp_async_wait_group<2>(); break;
    default: cp_async_wait_group<3>(); break;
  }
}

// mapa.shared::cluster.u32 d, a, rank (sm_90): the shared::cluster address of shared-memory
// address `a` of this CTA in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t mapa_shared_cluster(uint32_t a, uint32_t rank) {
  uint32_t d;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(rank));
  return d;
}

// ld.shared::cluster.f32 d, [a] (sm_90): a load from any CTA's shared memory in the cluster.
__device__ __forceinline__ float ld_shared_cluster_f32(uint32_t a) {
  float d;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(d) : "r"(a) : "memory");
  return d;
}

// ld.shared::cluster.v4.f32 {d}, [a] (sm_90), a 16-byte aligned.
__device__ __forceinline__ float4 ld_shared_cluster_v4_f32(uint32_t a) {
  float4 d;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(d.x), "=f"(d.y), "=f"(d.z), "=f"(d.w)
               : "r"(a)
               : "memory");
  return d;
}

// st.shared.v4.f32 [a], {v} (a 16-byte aligned shared-memory address).
__device__ __forceinline__ void st_shared_v4_f32(uint32_t a, const float (&v)[4]) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "f"(v[0]), "f"(v[1]),
               "f"(v[2]), "f"(v[3])
               : "memory");
}

// ld.shared.b64 d, [a], volatile: it stays where it is written (after the wgmma it follows, say)
// rather than hoisted to where its register would live across the products.
__device__ __forceinline__ uint64_t ld_shared_u64_here(uint32_t a) {
  uint64_t d;
  asm volatile("ld.shared.b64 %0, [%1];\n" : "=l"(d) : "r"(a));
  return d;
}

// ld.shared.v4.f32 {d}, [a] (a 16-byte aligned shared-memory address).
__device__ __forceinline__ void ld_shared_v4_f32(float (&d)[4], uint32_t a) {
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a)
               : "memory");
}

}  // namespace mlakit::ptx
