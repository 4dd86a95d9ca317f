// q packed into the workspace (sm90): the decode kernel reads q by a 2-D TMA map of equally
// spaced rows; q given as a view whose rows are not (a gap between requests or tokens, heads
// further apart than their rows: RunArgs, "Views") is first copied, row by row, into a dense
// [rows, d_qk] tensor in the workspace by this small kernel on the stream, and the map reads that.
// q is small beside the cache (h_q 128, bf16: 144 KiB a request); the workspace always holds room
// for it (Setup::q_pack_offset), since any run may pass such a view.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "mlakit/mlakit.h"
#include "plan/decode_params.h"

namespace mlakit::sm90 {

struct PackQParams {
  const uint8_t* q;    // the view, rows of row_bytes at view.offset(request, r) * elem_bytes
  uint8_t* packed;     // [requests * rows, row_bytes], 16-byte aligned
  plan::RowView view;  // q's strides, in elements
  int64_t requests;    // the kernels' requests (a sparse problem's rows: b * s_q)
  int32_t rows;        // rows per request (s_q * h_q, or h_q when sparse)
  int32_t row_bytes;   // d_qk * elem_bytes, a multiple of 16
  int32_t elem_bytes;
};

// Bytes of the packed q of `problem` (its max_batch), 256-aligned.
size_t packed_q_bytes(const Problem& problem);

// Launches the copy on `stream`, sized for `sm_count` SMs. With pdl it waits for the previous
// kernel before reading q (q may come from it) and lets the next one launch.
Status launch_pack_q(const PackQParams& params, int32_t sm_count, cudaStream_t stream, bool pdl);

// A bf16 q split into two e4m3 parts (Widen::kQSplit): each row r of the view (d_qk = 576 values)
// times 2^k, k such that its largest magnitude lands in [128, 256), becomes the e4m3 high part h
// (x 2^k with its mantissa cut to 3 bits) in bytes 0..575 of packed row r and the residual
// l = e4m3(x 2^k - h) in 576..1151; row_scale[r] = 2^-k (1 for a row of zeros, and for var_q's
// rows past q_len, which are zeros). A bf16 value has 8 significant bits, h takes the first 4 and
// the residual the other 4 at most, so x = (h + l) 2^-k exactly for every |x| down to 2^-9 of
// the row's largest (its residual then is still a multiple of e4m3's smallest subnormal, 2^-9);
// below, to 2^-10 2^-k absolutely. A NaN in q stays a NaN (e4m3's), as on the 16-bit path; an
// infinity saturates to +-448 and leaves its row unscaled (k = 0: its finite values lose the
// precision of the scaling).
struct SplitQParams {
  const uint8_t* q;    // the view's rows, 16-bit
  uint8_t* packed;     // [requests * rows, 2 * d_qk] bytes, 16-byte aligned
  float* row_scale;    // [requests * rows]
  plan::RowView view;  // q's strides, in elements
  int64_t requests;
  int32_t rows;  // rows per request (s_q * h_q)
};

// Bytes of the split q of `problem` (its max_batch): the parts, 256-aligned, then the scales.
size_t split_q_scales_offset(const Problem& problem);
size_t split_q_bytes(const Problem& problem);

// Launches the split on `stream` (a warp a row), PDL as launch_pack_q.
Status launch_split_q(const SplitQParams& params, int32_t sm_count, cudaStream_t stream, bool pdl);

}  // namespace mlakit::sm90
