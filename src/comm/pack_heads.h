// The all-to-all by heads (CpMerge::kHeads) sends each rank its heads of this rank's partial:
// pack_heads lays the partial [b, s_q, N, h_q / N, ...] out by destination, [N, b, s_q, h_q / N,
// ...], so that each destination's slice is one contiguous send (NCCL sends contiguous buffers).
#pragma once

#include <cstdint>

#include "mlakit/mlakit.h"

namespace mlakit::comm {

struct PackHeadsArgs {
  const void* partial_out = nullptr;   // [rows, N, slice_out_row bytes]: the partial outputs
  const float* partial_lse = nullptr;  // [rows, N, heads]
  void* send_out = nullptr;            // [N, rows, slice_out_row bytes]; slot self unused
  float* send_lse = nullptr;           // [N, rows, heads]; slot self unused
  void* self_out = nullptr;            // [rows, slice_out_row bytes]: slot self goes here
  float* self_lse = nullptr;           // [rows, heads]
  int64_t rows = 0;                    // b * s_q
  int32_t world = 1;                   // N
  int32_t self = 0;                    // this rank
  int32_t heads = 0;                   // h_q / N
  int32_t head_bytes = 0;              // bytes of one head's output row: 512 * e
};

// One kernel on `stream` (device pointers, 16-byte aligned outputs; graph-capturable).
Status pack_heads(const PackHeadsArgs& args, Stream stream);

}  // namespace mlakit::comm
