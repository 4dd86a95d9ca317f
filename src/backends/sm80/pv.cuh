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

// Rescales o by this tile's alpha, then adds P V for the tile in s_kv.
template <typename T, typename Cfg>
__device__ __forceinline__ void accumulate_pv(const SharedStorage<T, Cfg>& s, uint32_t s_kv,
                                              int warp, int lane, OutAccumulators<Cfg>& o) {
  const int o_row0 = (warp / Cfg::kOColGroups) * Cfg::kORows;
  const int o_chunk0 = (warp % Cfg::kOColGroups) * (Cfg::kOCols / 8);
  const int g = lane / 4;

  float alpha[Cfg::kOMTiles][2];
  bool rescale = false;
#pragma unroll
  for (int mt = 0; mt < Cfg::kOMTiles; ++mt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      alpha[mt][e] = s.alpha[o_row0 + mt * 16 + g + 8 * e];
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

  const uint32_t s_p = ptx::smem_u32(s.p);
  // A (P): lanes 0-15 rows 0-15 at tokens 0-7 of the k-step, lanes 16-31 at tokens 8-15.
  // B (V, transposed): lanes 0-7 tokens 0-7 and lanes 8-15 tokens 8-15 of column chunk c,
  // lanes 16-31 the same for chunk c + 1.
  const int v_token = ((lane / 8) % 2) * 8 + lane % 8;
  const int v_hi = lane / 16;
#pragma unroll 1
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
    uint32_t a[Cfg::kOMTiles][4];
#pragma unroll
    for (int mt = 0; mt < Cfg::kOMTiles; ++mt) {
      const int row = o_row0 + mt * 16 + lane % 16;
      ptx::ldmatrix_sync_x4(a[mt], s_p + p_chunk_offset(row, 2 * kk + lane / 16));
    }
    const int token = kk * 16 + v_token;
#pragma unroll
    for (int np = 0; np < Cfg::kONTiles / 2; ++np) {
      uint32_t b[4];
      ptx::ldmatrix_sync_x4_trans(b, s_kv + row_chunk_offset(token, o_chunk0 + 2 * np + v_hi));
#pragma unroll
      for (int mt = 0; mt < Cfg::kOMTiles; ++mt) {
        mma_m16n8k16<T>(o[mt][2 * np], a[mt], b[0], b[1]);
        mma_m16n8k16<T>(o[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

}  // namespace mlakit::sm80
