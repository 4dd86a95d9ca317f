// Sparse decode of the V3.2 cache with a bf16 q, tiles of 16 query rows, on mma.sync: the 8
// consumer warps share every block, each owning 64 of the 512 latent dims (so one scale group:
// warp w, group w / 2), which it widens once and uses twice. Tactics kSparseMmaTactic + 0
// (persistent) and + 1 (one-shot), and kSparseMmaClusterTactic (the cluster schedule, the indices
// read as given), launch.h. The producer and the stages are the sparse narrow
// kernel's (decode_sparse_narrow.cuh: the tokens copied as cached by cp.async).
// Per block of 64 tokens, warp w (lane = 4 r + t):
//   loads     the e4m3 bytes of its dims, 4 a thread (dims 16 ks + 4t .. + 3 of its 64, token
//             8 nt + r, ks 0..3, nt 0..7), the RoPE values of dims 16w .. 16w + 15 (warps 0..3),
//             the scales it needs; then the stage goes back (every consumer thread arrives), long
//             before the block is done.
//   S_w       its part of S = Q K^T over its dims: 32 mma m16n8k16 in fp16 (A = Q from registers,
//             loaded once a chunk and turned to fp16 times 2^j (and the cache's k_scale), one
//             power of two for the chunk that puts the tile's largest value in [2^14, 2^15);
//             B = K widened by the hardware conversion (fp8::widen4_f16_cvt: two instructions a
//             4 bytes, where the exact integer widening to bf16 took nine), a k-step's 16 dims
//             as pairs 4t, 4t + 1 | 4t + 2, 4t + 3), times each token's scale, plus the RoPE
//             part (bf16 mma, its q times the same 2^j); written to shared memory. S comes out
//             times 2^j; the chunk's softmax scale divides it out.
//   softmax   warp w sums the 8 parts of tokens 8w .. 8w + 7 (lane: head lane / 2, 4 tokens);
//             P against the running max (a lazy max: the block's maxima meet in shared memory
//             only when some value passes it by more than 2^8, which one bar.red tells every
//             thread) times each token's scale of each group and the group's block factor (a
//             power of two that brings the group's largest scale of the block to [1, 2), so P's
//             fp16 copies keep full precision whatever the cache's scales) goes to shared
//             memory: 4 fp16 copies, one per scale group.
//   O_w       += P_g V over its dims: 32 mma m16n8k16 in fp16, A = P_g by ldmatrix, B = the
//             widened K registers transposed by movmatrix (8 x 8 blocks): V is the latent,
//             already widened. O_w follows its group's factor from block to block (rescaled with
//             the softmax's alpha) and the epilogue divides the last one out.
// Two barriers of the 256 consumer threads per block (three where the max moves by far: a
// chunk's first blocks). The output dims come out in the same per-k-step order: thread t holds
// dims 16 ks + 4t .. + 3 of each row (o[ks][hf]: dims 4t + 2 hf and + 1), one 8-byte store (bf16)
// or 16-byte store (fp32 partials).
// Trace points (trace.cuh): warps 0 and 4 (roles 0, 1) 0 block start, 1 its data landed, 3 the S
// parts out, 4 P out, 5 P V done; the producer's as in decode_sparse_narrow.cuh.
#pragma once

#include <cuda_bf16.h>

#include <cuda/ptx>

#include "backends/sm90/config.h"
#include "backends/sm90/decode_sparse_narrow.cuh"
#include "backends/sm90/device.cuh"
#include "backends/sm90/launch.h"
#include "backends/sm90/params.h"
#include "backends/sm90/sparse_entry.cuh"
#include "backends/sm90/trace.cuh"
#include "kernels/common/fp8.cuh"
#include "kernels/common/ptx.h"
#include "plan/work.cuh"

namespace mlakit::sm90 {

inline constexpr int kMmaWarps = kConsumerThreads / 32;  // 8
// Registers after setmaxnreg (the CTA's shape: kSparseThreads, sparse_entry.cuh; the producer:
// decode_sparse_narrow.cuh).
inline constexpr int kMmaProducerRegisters = 40;
inline constexpr int kMmaConsumerRegisters = 216;
static_assert(fits_sparse_launch(kMmaConsumerRegisters, kMmaConsumerRegisters,
                                 kMmaProducerRegisters));
inline constexpr int kMmaRows = 16;             // query rows: mma's M
inline constexpr int kRedStride = kBlockN + 8;  // floats a row of a warp's S part
inline constexpr int kPStride = kBlockN + 8;    // bf16 a row of a P copy (144 bytes)
// P is worked out against the running max as long as no value of the block passes it by more
// than 2^8 (P's fp16 copies then stay below 2^9); only then the block's maxima meet.
inline constexpr float kLazyMaxLog2 = 8.0f;

// The shared-memory plan: Q (16 rows, as the 16-bit narrow tile holds it), three stages of 64
// tokens as cached, each warp's part of S, the heads' block maxima and steps, the four P copies,
// then SmallStorage. 196 KB.
struct SparseMmaLayout {
  static constexpr int kStages = 3;
  static constexpr int kStageBytes = kBlockN * kBlockwiseBytes;
  static constexpr int kQChunkBytes = kMmaRows * 128;
  static constexpr int kQBytes = kQkChunks * kQChunkBytes;
  static constexpr size_t kQOffset = 0;
  static constexpr size_t kKvOffset = kQOffset + kQBytes;
  static constexpr size_t kRedOffset = kKvOffset + size_t{kStages} * kStageBytes;
  static constexpr size_t kRedBytes = size_t{kMmaWarps} * kMmaRows * kRedStride * 4;
  // Per head: the 8 warps' block maxima, then (epilogue) their sums; the step, the running max,
  // the epilogue's factor.
  static constexpr size_t kHeadOffset = kRedOffset + kRedBytes;
  static constexpr size_t kHeadBytes = size_t{kMmaRows} * (2 * kMmaWarps + 4) * 4;
  static constexpr size_t kPOffset = kHeadOffset + kHeadBytes;
  static constexpr size_t kPBytes = size_t{4} * kMmaRows * kPStride * 2;
  // The warps' largest |q| (a chunk's) and the four scale groups' P factors (a block's).
  static constexpr size_t kFactorOffset = kPOffset + kPBytes;
  static constexpr size_t kFactorBytes = (2 * kMmaWarps + 4) * 4;
  static constexpr size_t kSmallOffset = (kFactorOffset + kFactorBytes + 15) / 16 * 16;
  static constexpr size_t kSmemBytes = kSmallOffset + sizeof(SmallStorage) + 1024;
  static_assert(kStageBytes % 1024 == 0 && kQBytes % 1024 == 0);
  static_assert(kPOffset % 16 == 0 && kRedOffset % 16 == 0 && kFactorOffset % 16 == 0);
  static_assert(kSmemBytes <= 227 * 1024, "an sm_90 CTA has at most 227 KB");
};

#ifdef MLAKIT_SM90_WGMMA

// Per head h: maxima[w] (the warps' block maxima, then the epilogue's sums), step, m, factor.
struct MmaHeads {
  float* base;
  __device__ __forceinline__ float* maxima(int h) const { return base + h * (2 * kMmaWarps + 4); }
  __device__ __forceinline__ float* sums(int h) const { return maxima(h) + kMmaWarps; }
  __device__ __forceinline__ float& alpha(int h) const { return maxima(h)[2 * kMmaWarps]; }
  __device__ __forceinline__ float& max(int h) const { return maxima(h)[2 * kMmaWarps + 1]; }
  __device__ __forceinline__ float& factor(int h) const { return maxima(h)[2 * kMmaWarps + 2]; }
};

__device__ __forceinline__ float part_of(const float4& v, int g) {
  return g == 0 ? v.x : g == 1 ? v.y : g == 2 ? v.z : v.w;
}

// The larger magnitude of a bf16 pair, as bits (magnitudes order as their bits).
__device__ __forceinline__ uint32_t abs_max_bits(uint32_t v) {
  const uint32_t a = v & 0x7fff7fffu;
  return max(a & 0xffffu, a >> 16);
}

// 2^(127 - e) for the exponent e of x (so x times it is in [1, 2)); 1 for zeros and subnormals,
// clamped so that it and its inverse stay normal.
__device__ __forceinline__ float unit_factor(float x) {
  const int e = static_cast<int>((__float_as_uint(x) >> 23) & 0xffu);
  return e == 0 ? 1.0f : __uint_as_float(static_cast<uint32_t>(254 - min(e, 253)) << 23);
}

// A bf16 pair times a power of two f (exact where the results are normal) as fp16 or bf16.
template <typename T>
__device__ __forceinline__ uint32_t scale_bf16_pair(uint32_t v, float f) {
  return pack2<T>(__uint_as_float(v << 16) * f, __uint_as_float(v & 0xffff0000u) * f);
}

// kCluster: the cluster schedule (SparseClusterChunks), tokens without an index masked through
// the stage's bad_tokens, and the chunk's result left over the stages for the cluster merge.
template <bool kCluster>
__device__ __forceinline__ void consume_sparse_mma(const DecodeParams& p, const Smem& s,
                                                   uint8_t* base, int m_tile, int32_t cta) {
  using L = SparseMmaLayout;
  const int tid = static_cast<int>(threadIdx.x);
  const int w = __shfl_sync(0xffffffffu, tid / 32, 0);
  const int lane = tid % 32, r = lane / 4, t = lane % 4;
  const int group = w / 2;                // the scale group of the warp's dims
  const bool rope = w < 4;                // warps 0..3 also take 16 RoPE dims each
  const int hh = lane / 2;                // softmax: the thread's head
  const int tq = 8 * w + 4 * (lane % 2);  // and its 4 tokens of each block
  SmallStorage& sm = *s.small;
  float* const red = reinterpret_cast<float*>(base + L::kRedOffset);
  const MmaHeads heads{reinterpret_cast<float*>(base + L::kHeadOffset)};
  __half* const pbuf = reinterpret_cast<__half*>(base + L::kPOffset);
  uint32_t* const q_amax = reinterpret_cast<uint32_t*>(base + L::kFactorOffset);  // [2][warps]
  float* const group_factor = reinterpret_cast<float*>(q_amax + 2 * kMmaWarps);
  const int32_t row0 = m_tile * kMmaRows;
  const fp8::Scales scales = fp8::read_scales(p);
  // The cache's extra scale k_scale multiplies only the NoPE part of the scores (it goes into Q's
  // NoPE values below) and the outputs (the epilogue's factor).
  const float scale_log2 = p.scale_log2 * scales.q;

  auto chunks = sparse_chunks<kCluster>(p, sm, cta);
  plan::Chunk c;
  uint32_t n_chunk = 0, n_block = 0;
  while (chunks.next(&c)) {
    const int32_t limit = visible_limit(p, c, row0 + hh);
    float m = -INFINITY, l = 0.0f;  // head hh's running max and the thread's share of its sum
    float o[4][2][4];               // [ks][par][c]: rows r, r + 8; dims 16 ks + 4t + par, + 2
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
#pragma unroll
        for (int i = 0; i < 4; ++i) o[ks][hf][i] = 0.0f;
      }
    }
    // Q's registers: rows r, r + 8; dims 64w + 16 ks + 4t .. + 3 (the RoPE's 512 + 16w + 4t ..),
    // in fp16 times 2^j (the NoPE part times k_scale as well), one power of two for the tile's
    // chunk that brings its largest value to [2^14, 2^15): exact without k_scale (a bf16 is an
    // fp16 in that range; values below 2^-29 of the largest lose bits, far below bf16's own
    // rounding of the larger ones), one fp16 rounding with it. The RoPE part stays bf16 times
    // the same 2^j, so S comes out times 2^j, and the softmax's scale divides it out.
    wait_parity(&sm.q_full, n_chunk & 1);
    ++n_chunk;
    uint32_t qa[4][4], qr[4];
    uint32_t amax = 0, amax_rope = 0;  // the largest |q| (bf16 bits), NoPE and RoPE
    {
      const uint8_t* q = s.q;
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          // mma's A registers: e (row r + 8e), k 2t, 2t + 1 and + 8: here dims 4t, 4t + 1 and
          // 4t + 2, 4t + 3, K's B registers the same pairs (fp8::widen4_f16_cvt).
          const uint32_t* v = reinterpret_cast<const uint32_t*>(
              q + w * L::kQChunkBytes + swizzled(r + 8 * e, 32 * ks + 8 * t));
          qa[ks][e] = v[0];
          qa[ks][e + 2] = v[1];
          amax = max(amax, max(abs_max_bits(v[0]), abs_max_bits(v[1])));
        }
      }
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const uint32_t* v = reinterpret_cast<const uint32_t*>(q + 8 * L::kQChunkBytes +
                                                              swizzled(r + 8 * e, 32 * w + 8 * t));
        qr[e] = rope ? v[0] : 0u;
        qr[e + 2] = rope ? v[1] : 0u;
        amax_rope = max(amax_rope, max(abs_max_bits(qr[e]), abs_max_bits(qr[e + 2])));
      }
    }
    arrive(&sm.q_empty);
    amax = __reduce_max_sync(0xffffffffu, amax);
    amax_rope = __reduce_max_sync(0xffffffffu, amax_rope);
    if (lane == 0) {
      q_amax[w] = amax;
      q_amax[kMmaWarps + w] = amax_rope;
    }
    consumer_sync(kEpilogueBarrier);
#pragma unroll
    for (int v = 0; v < kMmaWarps; ++v) {
      amax = max(amax, q_amax[v]);
      amax_rope = max(amax_rope, q_amax[kMmaWarps + v]);
    }
    // The largest product's factor: |q k_scale| of the NoPE part, |q| of the RoPE part. Its
    // exponent E: it is below 2^(E - 126), times 2^(141 - E) below 2^15; no scaling for zeros.
    const float top =
        fmaxf(__uint_as_float(amax << 16) * fabsf(scales.v), __uint_as_float(amax_rope << 16));
    const int e_max = static_cast<int>((__float_as_uint(top) >> 23) & 0xffu);
    const int j = e_max == 0 ? 0 : min(max(141 - e_max, -100), 100);
    const float qf = __uint_as_float(static_cast<uint32_t>(127 + j) << 23);
    const float chunk_log2 = scale_log2 * __uint_as_float(static_cast<uint32_t>(127 - j) << 23);
    const float qf_nope = qf * scales.v;  // rounded once, to fp16
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
      for (int i = 0; i < 4; ++i) qa[ks][i] = scale_bf16_pair<__half>(qa[ks][i], qf_nope);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) qr[i] = scale_bf16_pair<__nv_bfloat16>(qr[i], qf);
    float factor_now = 1.0f;  // the warp's scale group's P factor of the last block

    const int32_t n_blocks = (c.token_end - c.token_begin + kBlockN - 1) / kBlockN;
#pragma unroll 1
    for (int32_t b = 0; b < n_blocks; ++b) {
      const uint32_t nb = n_block + static_cast<uint32_t>(b);
      const uint32_t stage = nb % L::kStages, phase = (nb / L::kStages) & 1;
      const int32_t tok0 = c.token_begin + b * kBlockN;
      const uint8_t* st = s.kv + stage * L::kStageBytes;
      if (w % 4 == 0) trace(w / 4, 0);
      wait_parity(&sm.full[stage][0], phase);
      if (nb == 0 && tid == 0) grid_stamp(2);
      if (w % 4 == 0) trace(w / 4, 1);
      // kCluster: the block's tokens without an index (bit j: token j), read before the stage
      // goes back (the producer rewrites them for the stage's next block).
      uint64_t bad = 0;
      if constexpr (kCluster) bad = ptx::ld_shared_u64_here(ptx::smem_u32(&sm.bad_tokens[stage]));

      // Everything this block needs from the stage, then the stage goes back. Tokens past the
      // block's count (and, kCluster, those without an index) are zeros there (the producer's
      // zero-fill), so every load is unconditional: zero bytes and zero scales (0 x NaN would be
      // NaN in P V).
      uint32_t kraw[4][8];
      uint2 rraw[8];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const uint8_t* row = st + (8 * nt + r) * kBlockwiseBytes;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          kraw[ks][nt] = *reinterpret_cast<const uint32_t*>(row + 64 * w + 16 * ks + 4 * t);
        }
        rraw[nt] = rope ? *reinterpret_cast<const uint2*>(row + kV32RopeAt + 32 * w + 8 * t)
                        : make_uint2(0, 0);
      }
      float ssc[8][2];  // the scale of tokens 8 nt + 2t + e (S's columns), group `group`
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          ssc[nt][e] = *reinterpret_cast<const float*>(st + (8 * nt + 2 * t + e) * kBlockwiseBytes +
                                                       kV32ScaleAt + 4 * group);
        }
      }
      // The block's P factor of the warp's group: its largest scale to [1, 2) (the quad's four
      // threads hold the scales of all 64 tokens), so that P times a scale and the factor is an
      // fp16 of full precision wherever it matters (the factor leaves O in the epilogue).
      float smax = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) smax = fmaxf(smax, fmaxf(ssc[nt][0], ssc[nt][1]));
      smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, 1));
      smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, 2));
      const float factor = unit_factor(smax);
      if (w % 2 == 0 && lane == 0) group_factor[group] = factor;
      float4 psc[4];  // the four scales of the softmax's tokens tq .. tq + 3
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        psc[i] = *reinterpret_cast<const float4*>(st + (tq + i) * kBlockwiseBytes + kV32ScaleAt);
      }
      arrive(&sm.empty[stage]);

      // S_w: K widened (kept: it is V below), the products, the scales, the RoPE part.
      uint32_t kb[4][8][2];
      float sacc[8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) sacc[nt][i] = 0.0f;
      }
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          fp8::widen4_f16_cvt(kraw[ks][nt], kb[ks][nt][0], kb[ks][nt][1]);
          ptx::mma_sync_m16n8k16_f32_f16(sacc[nt], qa[ks], kb[ks][nt][0], kb[ks][nt][1]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        sacc[nt][0] *= ssc[nt][0];
        sacc[nt][1] *= ssc[nt][1];
        sacc[nt][2] *= ssc[nt][0];
        sacc[nt][3] *= ssc[nt][1];
        if (rope) ptx::mma_sync_m16n8k16_f32_bf16(sacc[nt], qr, rraw[nt].x, rraw[nt].y);
      }
      // The part, as [warp][head][token].
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          *reinterpret_cast<float2*>(red + (w * kMmaRows + r + 8 * e) * kRedStride + 8 * nt +
                                     2 * t) = make_float2(sacc[nt][2 * e], sacc[nt][2 * e + 1]);
        }
      }
      consumer_sync(kEpilogueBarrier);
      if (w % 4 == 0) trace(w / 4, 3);

      // Softmax: head hh, tokens tq .. tq + 3.
      float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int v = 0; v < kMmaWarps; ++v) {
        const float4 y =
            *reinterpret_cast<const float4*>(red + (v * kMmaRows + hh) * kRedStride + tq);
        x[0] += y.x;
        x[1] += y.y;
        x[2] += y.z;
        x[3] += y.w;
      }
      float bm = -INFINITY;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (tok0 + tq + i >= limit || plan::bad_token(bad, tq + i)) x[i] = -INFINITY;
        bm = fmaxf(bm, x[i]);
      }
      bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, 1));
      if (lane % 2 == 0) heads.maxima(hh)[w] = bm;
      const float4 gf = *reinterpret_cast<const float4*>(group_factor);
      // P against a base (the running max, scaled; 0 while the row has seen nothing), as four
      // fp16 copies; returns the thread's sum.
      const auto write_p = [&](float based) {
        float pv[4], sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          pv[i] = ptx::ex2_approx_ftz_f32(x[i] * chunk_log2 - based);
          sum += pv[i];
        }
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          const float f = part_of(gf, g);
          const uint2 v = make_uint2(
              pack2<__half>(pv[0] * (part_of(psc[0], g) * f), pv[1] * (part_of(psc[1], g) * f)),
              pack2<__half>(pv[2] * (part_of(psc[2], g) * f), pv[3] * (part_of(psc[3], g) * f)));
          *reinterpret_cast<uint2*>(pbuf + (g * kMmaRows + hh) * kPStride + tq) = v;
        }
        return sum;
      };
      // Lazy max: P against the running max m unless some value of the block passes it by more
      // than 2^kLazyMaxLog2 (or m is still -inf while the block has values); one barrier
      // (bar.red) then tells every thread whether any head's did. If none did (after a chunk's
      // first blocks, almost always), P stands, O keeps its scale and the block's maxima are not
      // read: two barriers a block instead of three. Else the maxima meet as before, P is
      // written again against the new max, and a third barrier publishes it.
      const float based = m == -INFINITY ? 0.0f : m * chunk_log2;
      const bool over = m == -INFINITY ? bm != -INFINITY : bm * chunk_log2 - based > kLazyMaxLog2;
      const float lazy_sum = write_p(based);
      float alpha_r = 1.0f, alpha_r8 = 1.0f;  // rows r and r + 8's factor for O
      if (consumer_sync_or(kEpilogueBarrier, over)) {
        float mx = m;
        {
          const float4 a = *reinterpret_cast<const float4*>(heads.maxima(hh));
          const float4 b4 = *reinterpret_cast<const float4*>(heads.maxima(hh) + 4);
          mx = fmaxf(fmaxf(fmaxf(mx, a.x), fmaxf(a.y, a.z)), fmaxf(fmaxf(a.w, b4.x), b4.y));
          mx = fmaxf(mx, fmaxf(b4.z, b4.w));
        }
        const MaxStep step = max_step(m, mx, chunk_log2);
        l = l * step.alpha + write_p(step.scaled);
        if (w == 0 && lane % 2 == 0) heads.alpha(hh) = step.alpha;
        consumer_sync(kEpilogueBarrier);
        alpha_r = heads.alpha(r);
        alpha_r8 = heads.alpha(r + 8);
      } else {
        l += lazy_sum;
      }
      if (w % 4 == 0) trace(w / 4, 4);

      // O_w *= alpha (and the factor's change); O_w += P_g V.
      const float moved = factor / factor_now;  // powers of two: exact
      factor_now = factor;
      const float a0 = alpha_r * moved, a1 = alpha_r8 * moved;
      if (__any_sync(0xffffffffu, a0 != 1.0f || a1 != 1.0f)) {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            o[ks][hf][0] *= a0;
            o[ks][hf][1] *= a0;
            o[ks][hf][2] *= a1;
            o[ks][hf][3] *= a1;
          }
        }
      }
      const uint32_t p_addr =
          ptx::smem_u32(pbuf + (group * kMmaRows + lane % 16) * kPStride + 8 * (lane / 16));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t pa[4];
        ptx::ldmatrix_sync_x4(pa, p_addr + 32 * j);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
            ptx::mma_sync_m16n8k16_f32_f16(o[ks][hf], pa, ptx::movmatrix_trans(kb[ks][2 * j][hf]),
                                           ptx::movmatrix_trans(kb[ks][2 * j + 1][hf]));
          }
        }
      }
      if (w % 4 == 0) trace(w / 4, 5);
    }
    n_block += static_cast<uint32_t>(n_blocks);
    if (tid == 0) grid_stamp(3);

    // Epilogue: head hh's sum over the 16 threads that hold parts of it, its LSE and factor.
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    if (lane % 2 == 0) heads.sums(hh)[w] = l;
    if (w == 0 && lane % 2 == 0) heads.max(hh) = m;
    consumer_sync(kEpilogueBarrier);
    const bool direct = c.slot == -1;
    // Left in shared memory for the cluster merge (sparse_entry.cuh): the LSE per row in
    // merge_lse, the rows normalized over the stages (every block is consumed: they are free).
    const bool merged = kCluster && c.slot == plan::kSlotCluster;
    if (tid < kMmaRows) {
      const int h = tid;
      const int32_t row = row0 + h;
      float total = 0.0f;
#pragma unroll
      for (int v = 0; v < kMmaWarps; ++v) total += heads.sums(h)[v];
      const float mh = heads.max(h);
      const float scaled = mh == -INFINITY ? 0.0f : mh * chunk_log2;
      const bool any = total > 0.0f;
      const float lse = any ? (scaled + log2f(total)) * kLn2 : -INFINITY;
      float factor = any ? 1.0f / total : 0.0f;
      if (row < p.rows) {
        if (direct && p.sinks != nullptr && any) factor /= 1.0f + expf(p.sinks[row % p.h_q] - lse);
        if (merged) {
          sm.merge_lse[h] = lse;
        } else if (!direct) {
          p.plan.partial_lse[int64_t{c.slot} * p.rows + row] = lse;
        } else if (p.lse != nullptr && row < p.out_view.live_rows(c.request, p.rows)) {
          p.lse[p.out_view.lse_index(c.request, row, p.rows)] = lse * p.lse_scale;
        }
      }
      heads.factor(h) = factor * scales.v;
    }
    consumer_sync(kEpilogueBarrier);
    const int32_t live = direct ? p.out_view.live_rows(c.request, p.rows) : p.rows;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int32_t row = row0 + r + 8 * e;
      if (merged) {
        const float f = heads.factor(r + 8 * e) / factor_now;
        float* const g = reinterpret_cast<float*>(s.kv) + (r + 8 * e) * kMergeStride;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          *reinterpret_cast<float4*>(g + 64 * w + 16 * ks + 4 * t) =
              make_float4(o[ks][0][2 * e] * f, o[ks][0][2 * e + 1] * f, o[ks][1][2 * e] * f,
                          o[ks][1][2 * e + 1] * f);
        }
        continue;
      }
      if (row >= live) continue;
      const float f = heads.factor(r + 8 * e) / factor_now;
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const int dim = 64 * w + 16 * ks + 4 * t;
        const float4 v = make_float4(o[ks][0][2 * e] * f, o[ks][0][2 * e + 1] * f,
                                     o[ks][1][2 * e] * f, o[ks][1][2 * e + 1] * f);
        if (direct) {
          __nv_bfloat16* g =
              static_cast<__nv_bfloat16*>(p.out) + p.out_view.offset(c.request, row) + dim;
          *reinterpret_cast<uint2*>(g) =
              make_uint2(pack2<__nv_bfloat16>(v.x, v.y), pack2<__nv_bfloat16>(v.z, v.w));
        } else {
          *reinterpret_cast<float4*>(p.plan.partial_out + (int64_t{c.slot} * p.rows + row) * kDv +
                                     dim) = v;
        }
      }
    }
    // The heads' sums and factors are read before the next chunk writes them.
    consumer_sync(kEpilogueBarrier);
  }
  if (tid == 0) grid_stamp(4);
}

#endif  // MLAKIT_SM90_WGMMA

// Schedules persistent and one-shot, or (kCluster, an instantiation of its own) the cluster
// schedule with the indices read as given (the split kernel's, decode_sparse_v32.cuh); q and out
// bf16.
template <bool kCluster>
__global__ void __launch_bounds__(kSparseThreads, 1)
    sparse_mma_kernel(const __grid_constant__ DecodeParams p) {
#ifdef MLAKIT_SM90_WGMMA
  using L = SparseMmaLayout;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* base = aligned_smem(smem_raw);
  const Smem s{.q = base + L::kQOffset,
               .kv = base + L::kKvOffset,
               .exchange = nullptr,
               .small = reinterpret_cast<SmallStorage*>(base + L::kSmallOffset)};
  SmallStorage& sm = *s.small;
  const int32_t m_tiles = (p.rows + kMmaRows - 1) / kMmaRows;
  const SparseCta at = sparse_cta<kCluster>(p, m_tiles);
  const int m_tile = at.m_tile;
  const int32_t cta = at.cta;
  if (threadIdx.x == 0) grid_stamp(0);
  if (threadIdx.x == 0) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(&p.q_map) : "memory");
    for (int i = 0; i < L::kStages; ++i) {
      // every producer thread's copies (kCluster: and each producer warp's bad_tokens byte)
      cuda::ptx::mbarrier_init(&sm.full[i][0],
                               kSparseProducerThreads + (kCluster ? kSparseProducerWarps : 0));
      cuda::ptx::mbarrier_init(&sm.empty[i], kConsumerThreads);
    }
    cuda::ptx::mbarrier_init(&sm.q_full, 1);
    cuda::ptx::mbarrier_init(&sm.q_empty, kConsumerThreads);
    trace_reset();
    cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
  }
  sparse_prologue<kCluster>(p, sm, at);
  if (threadIdx.x >= kConsumerThreads) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kMmaProducerRegisters));
    produce_sparse_narrow<L, kMmaRows, kSparseProducerWarps, kCluster, 2>(p, s, m_tile, cta);
    if (kCluster && p.plan.cluster_size > 1) {
      merge_sparse_cluster<__nv_bfloat16, L, kMmaRows, kConsumerThreads>(p, false);
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kMmaConsumerRegisters));
    consume_sparse_mma<kCluster>(p, s, base, m_tile, cta);
    if (kCluster && p.plan.cluster_size > 1) {
      merge_sparse_cluster<__nv_bfloat16, L, kMmaRows, kConsumerThreads>(p, true);
    }
  }
  if (threadIdx.x == 0) grid_stamp(5);
  trace_finish();
#endif
}

}  // namespace mlakit::sm90
