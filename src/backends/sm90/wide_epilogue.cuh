// The wide tile's epilogue of one chunk, shared by its consumers (decode_kernel.cuh for a 16-bit
// cache, decode_fp8_wide.cuh for an e4m3 one): the two warpgroups' softmax denominators meet in
// shared memory; each row's LSE and scale (1 / sum, the sink factor when the chunk is the whole
// request, the V dequantization scale); then the accumulators of O (this warpgroup's 256 columns,
// the m64n256 layout of wgmma.cuh) go to the output, to the fp32 partial, or, in the cluster
// schedule, over the KV stages for the cluster merge.
#pragma once

#include "backends/sm90/config.h"
#include "backends/sm90/device.cuh"
#include "backends/sm90/params.h"
#include "backends/sm90/trace.cuh"
#include "kernels/common/numeric.cuh"
#include "plan/work.cuh"

namespace mlakit::sm90 {

#ifdef MLAKIT_SM90_WGMMA

// Called by all 256 consumer threads after their last P V of the chunk. kWg: the calling
// warpgroup when the caller knows it at compile time (the split sparse kernel, whose two
// warpgroups run different code: their epilogues are two copies, which meet at an unaligned
// barrier), else -1. m: the rows' running
// max (raw score units), l: this thread's share of their denominators, in P's units
// (2^lse_shift_log2 times the probabilities); scale_log2: the scores' scale; chunk_parity: the
// chunk's count & 1 (red_sum is double-buffered across chunks).
template <typename TOut, int kWg = -1>
__device__ __forceinline__ void write_wide_chunk(const DecodeParams& p, const Smem& s,
                                                 const plan::Chunk& c, int32_t row0,
                                                 const float (&m)[2], float (&l)[2],
                                                 const float (&o)[128], float scale_log2,
                                                 float lse_shift_log2, float v_scale,
                                                 uint32_t chunk_parity) {
  const int tid = static_cast<int>(threadIdx.x);
  const int wg = kWg >= 0 ? kWg : __shfl_sync(0xffffffffu, tid / 128, 0);
  const int t = tid % 128;
  const int lane = t % 32;
  const int row_a = (t / 32) * 16 + lane / 4;  // the thread's rows: row_a and row_a + 8
  SmallStorage& sm = *s.small;
  // Epilogue: the two warpgroups' denominators, then LSE and the scale of each row.
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    l[e] += __shfl_xor_sync(0xffffffffu, l[e], 1);
    l[e] += __shfl_xor_sync(0xffffffffu, l[e], 2);
    if (lane % 4 == 0) sm.red_sum[chunk_parity][wg][row_a + 8 * e] = l[e];
  }
  if constexpr (kWg >= 0) {
    consumer_sync_unaligned(kEpilogueBarrier);  // the two warpgroups' copies of this code meet
  } else {
    consumer_sync(kEpilogueBarrier);
  }
  if (tid == 0) grid_stamp(6);
  const bool merged = c.slot == plan::kSlotCluster;  // left in shared memory for the cluster
  const bool direct = c.slot == -1;
  // Each lane works out one of its two rows (lanes q and q ^ 1 hold the same two), the other
  // row's scale comes from lane q ^ 1: half the chain of log2f and division per thread.
  float scale[2];
  {
    const int e = lane & 1;
    const int row = row_a + 8 * e;
    const int32_t r = row0 + row;
    const float total = sm.red_sum[chunk_parity][0][row] + sm.red_sum[chunk_parity][1][row];
    const bool any = total > 0.0f;
    const float lse =
        any ? ((e == 0 ? m[0] : m[1]) * scale_log2 + log2f(total) - lse_shift_log2) * kLn2
            : -INFINITY;
    float own = any ? 1.0f / total : 0.0f;
    if (r < p.rows) {
      if (direct && p.sinks != nullptr && any) own /= 1.0f + expf(p.sinks[r % p.h_q] - lse);
      if (wg == 0 && lane % 4 < 2) {
        if (merged) {
          sm.merge_lse[row] = lse;
        } else if (!direct) {
          p.plan.partial_lse[int64_t{c.slot} * p.rows + r] = lse;
        } else if (p.lse != nullptr && r < p.out_view.live_rows(c.request, p.rows)) {
          // natural or base 2; var_q: no row past the request's q_len
          p.lse[p.out_view.lse_index(c.request, r, p.rows)] = lse * p.lse_scale;
        }
      }
    }
    own *= v_scale;
    const float other = __shfl_xor_sync(0xffffffffu, own, 1);
    scale[0] = e == 0 ? own : other;
    scale[1] = e == 0 ? other : own;
  }
  if (tid == 0) grid_stamp(7);
  if (merged) {
    // Both warpgroups are past their last P V (the barrier above) and every copy has landed:
    // the stages are free.
    float* buf = reinterpret_cast<float*>(s.kv);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float* g = buf + (row_a + 8 * e) * kMergeStride + wg * kColsPerWarpgroup + 2 * (lane % 4);
#pragma unroll
      for (int i = 2 * e; i < 128; i += 4) {
        *reinterpret_cast<float2*>(g + 8 * (i / 4)) =
            make_float2(o[i] * scale[e], o[i + 1] * scale[e]);
      }
    }
    return;
  }
  // Out (or the partial) row by row. The accumulator layout gives each lane 2 adjacent columns
  // of every 8; stored as they are, bf16 out is 4-byte stores, each warp store touching 8 rows
  // of 16 bytes: those took 5-8 us per tile on the H200 (h_q 128, batch 64-128), as long as 3
  // blocks of the main loop. For out the lanes of a row swap values first (quad_transpose) so
  // each store is 16 bytes and a row's four lanes write 64 adjacent bytes: 2-3 us.
  // out may be a view: each row at its own offset (plan::RowView); partials are contiguous.
  const int64_t first_row = int64_t{c.slot} * p.rows;
  const int q = lane % 4;
  // Rows written: all of the partial's; of out, the request's (var_q: up to its q_len).
  const int32_t live_rows = direct ? p.out_view.live_rows(c.request, p.rows) : p.rows;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int32_t r = row0 + row_a + 8 * e;
    const bool live = r < live_rows;  // the shuffles below need every lane, live row or not
    const int32_t r_live = min(r, p.rows - 1);
    if (direct) {
      TOut* g =
          static_cast<TOut*>(p.out) + p.out_view.offset(c.request, r_live) + wg * kColsPerWarpgroup;
#pragma unroll
      for (int k0 = 0; k0 < 32; k0 += 4) {
        uint32_t v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int i = 4 * (k0 + j) + 2 * e;
          v[j] = pack2<TOut>(o[i] * scale[e], o[i + 1] * scale[e]);
        }
        quad_transpose(v, q);
        if (live) {
          *reinterpret_cast<uint4*>(g + 8 * (k0 + q)) = make_uint4(v[0], v[1], v[2], v[3]);
        }
      }
    } else if (live) {
      // fp32 partials as they are: 8-byte stores, a row's four lanes one whole 32-byte sector.
      // (A full quad transpose stored each lane's 32 bytes as two 16-byte halves of a sector
      // and cost 4-6 us more at h_q 128 batch 1-8; one exchange with lane q ^ 1 for whole
      // sectors of 16-byte stores still cost 0.8 us more at batch 1, H200.)
      float* g = p.plan.partial_out + (first_row + r_live) * kDv + wg * kColsPerWarpgroup + 2 * q;
#pragma unroll
      for (int i = 2 * e; i < 128; i += 4) {
        *reinterpret_cast<float2*>(g + 8 * (i / 4)) =
            make_float2(o[i] * scale[e], o[i + 1] * scale[e]);
      }
    }
  }
}

#endif  // MLAKIT_SM90_WGMMA

}  // namespace mlakit::sm90
