// What device-side planning reads: the lengths and the static shape of the plan. Shared by the
// plan kernel (both schedules) and the persistent planner that runs inside a decode kernel.
#pragma once

#include <cstdint>

#include "plan/plan.h"

namespace mlakit::plan {

struct PlanInputs {
  const int32_t* seq_lens;  // [batch]
  int32_t batch;
  int32_t max_len;  // lengths are clamped to [0, max_len]
  int32_t block_n;
  int32_t fixed_cost_blocks;
  int32_t min_chunk_blocks;
  int32_t num_parts;
  int32_t max_splits;  // one-shot only
};

// A length as read from seq_lens, clamped to [0, max_len].
__device__ __forceinline__ int32_t clamp_len(int32_t len, int32_t max_len) {
  return min(max(len, 0), max_len);
}
// Length of request i clamped to [0, max_len]; 0 past the batch.
__device__ __forceinline__ int32_t clamped_len(const int32_t* seq_lens, int32_t i, int32_t batch,
                                               int32_t max_len) {
  return i < batch ? clamp_len(seq_lens[i], max_len) : 0;
}
__device__ __forceinline__ int32_t clamped_len(const PlanInputs& in, int32_t i) {
  return clamped_len(in.seq_lens, i, in.batch, in.max_len);
}
__device__ __forceinline__ int32_t request_blocks(const PlanInputs& in, int32_t i) {
  return ceil_div(clamped_len(in, i), in.block_n);
}

}  // namespace mlakit::plan
