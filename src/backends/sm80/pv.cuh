// O += P V of the sm80 decode kernel (the output layout of config.h: warp (row group, column
// group) owns kORows x kOCols fp32 accumulators for the whole chunk).
//
// V is the first 512 dims of the KV tile already in shared memory (K and V are the same memory);
// its B fragments come from ldmatrix.trans, two n8 tiles per x4. P comes from shared memory as A
// fragments, each reused for kONTiles mma; each V fragment is reused for kOMTiles row tiles.
#pragma once

#include "backends/sm80/config.h"
#include "backends/sm80/loads.cuh"
#include "backends/sm80/mma.cuh"
#include "backends/sm80/qk_softmax.cuh"
#include "kernels/common/ptx.h"

namespace mlakit::sm80 {

template <typename Cfg>
using OutAccumulators = float[Cfg::kOMTiles][Cfg::kONTiles][4];

template <typename Cfg>
__device__ __forceinline__ void zero_output(OutAccumulators<Cfg>& o) {
#pragma unroll
  for (int mt = 0; mt < Cfg::kOMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < Cfg::kONTiles; ++nt) {
#pragma unroll
      for (int k = 0; k < 4; ++k) o[mt][nt][k] = 0.0f;
    }
  }
}

// o *= this tile's alpha (alpha_rows: per query row of the tile; skipped when every row's alpha is
// 1). warp: the output warp's index in the output layout.
template <typename Cfg>
__device__ __forceinline__ void rescale_o(const float* alpha_rows, int warp, int lane,
                                          OutAccumulators<Cfg>& o) {
  const int o_row0 = (warp / Cfg::kOColGroups) * Cfg::kORows;
  const int g = lane / 4;
  float alpha[Cfg::kOMTiles][2];
  bool rescale = false;
#pragma unroll
  for (int mt = 0; mt < Cfg::kOMTiles; ++mt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      alpha[mt][e] = alpha_rows[o_row0 + mt * 16 + g + 8 * e];
      rescale |= alpha[mt][e] != 1.0f;
    }
  }
  // Once the row maxima settle, alpha is 1 for most tiles: skip the multiplications.
  if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
    for (int mt = 0; mt < Cfg::kOMTiles; ++mt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
#pragma unroll
        for (int nt = 0; nt < Cfg::kONTiles; ++nt) {
          o[mt][nt][2 * e] *= alpha[mt][e];
          o[mt][nt][2 * e + 1] *= alpha[mt][e];
        }
      }
    }
  }
}

// The pieces of one warp's P V for one tile: P fragments per k-step of 16 tokens (load_p), then
// for each pair of n8 column tiles one V fragment and 2 x kOMTiles mma (step). s_p: the P tile;
// warp: the output warp's index in the output layout.
template <typename T, typename Cfg>
class PvOperands {
 public:
  static constexpr int kKSteps = kBlockN / 16;
  static constexpr int kColPairs = Cfg::kONTiles / 2;
  using PFragments = uint32_t[Cfg::kOMTiles][4];

  // A (P): lanes 0-15 rows 0-15 at tokens 0-7 of the k-step, lanes 16-31 at tokens 8-15.
  // B (V, transposed): lanes 0-7 tokens 0-7 and lanes 8-15 tokens 8-15 of column chunk c,
  // lanes 16-31 the same for chunk c + 1.
  __device__ __forceinline__ PvOperands(uint32_t s_p, uint32_t s_kv, int warp, int lane)
      : s_p_(s_p),
        s_kv_(s_kv),
        p_row_((warp / Cfg::kOColGroups) * Cfg::kORows + lane % 16),
        p_hi_(lane / 16),
        v_token_(((lane / 8) % 2) * 8 + lane % 8),
        v_chunk_((warp % Cfg::kOColGroups) * (Cfg::kOCols / 8) + lane / 16) {}

  __device__ __forceinline__ void load_p(int kk, PFragments& a) const {
#pragma unroll
    for (int mt = 0; mt < Cfg::kOMTiles; ++mt) {
      ptx::ldmatrix_sync_x4(a[mt], s_p_ + p_chunk_offset(p_row_ + mt * 16, 2 * kk + p_hi_));
    }
  }

  __device__ __forceinline__ void step(int kk, int np, const PFragments& a,
                                       OutAccumulators<Cfg>& o) const {
    uint32_t b[4];
    ptx::ldmatrix_sync_x4_trans(b, s_kv_ + row_chunk_offset(kk * 16 + v_token_, v_chunk_ + 2 * np));
#pragma unroll
    for (int mt = 0; mt < Cfg::kOMTiles; ++mt) {
      mma_m16n8k16<T>(o[mt][2 * np], a[mt], b[0], b[1]);
      mma_m16n8k16<T>(o[mt][2 * np + 1], a[mt], b[2], b[3]);
    }
  }

 private:
  uint32_t s_p_;
  uint32_t s_kv_;
  int p_row_;
  int p_hi_;
  int v_token_;
  int v_chunk_;
};

// o += P V for one tile: the P tile at s_p, V in the KV tile at s_kv. The two k-steps are
// unrolled only for the kRoles output warps (176 registers since setmaxnreg; h_q 128, batch 64,
// L 4096: 228.8-229.4 -> 224.6-226.3 us, H200). At 168 registers they had spilled their fragment
// addresses and run 5% slower (docs/sm80-decode.md, items 21 and 23).
template <typename T, typename Cfg>
__device__ __forceinline__ void add_pv(uint32_t s_p, uint32_t s_kv, int warp, int lane,
                                       OutAccumulators<Cfg>& o) {
  const PvOperands<T, Cfg> pv(s_p, s_kv, warp, lane);
  constexpr int kUnroll = Cfg::kRoles ? PvOperands<T, Cfg>::kKSteps : 1;
#pragma unroll kUnroll
  for (int kk = 0; kk < PvOperands<T, Cfg>::kKSteps; ++kk) {
    typename PvOperands<T, Cfg>::PFragments a;
    pv.load_p(kk, a);
#pragma unroll
    for (int np = 0; np < PvOperands<T, Cfg>::kColPairs; ++np) pv.step(kk, np, a, o);
  }
}

// Rescales o by this tile's alpha, then adds P V for the tile in s_kv.
template <typename T, typename Cfg>
__device__ __forceinline__ void accumulate_pv(const SharedStorage<T, Cfg>& s, uint32_t s_kv,
                                              int warp, int lane, OutAccumulators<Cfg>& o) {
  rescale_o<Cfg>(s.alpha, warp, lane, o);
  add_pv<T, Cfg>(ptx::smem_u32(s.p), s_kv, warp, lane, o);
}

}  // namespace mlakit::sm80
