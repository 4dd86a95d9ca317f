// The device parameters of the sm90 decode kernel: RunArgs and Problem lowered once per call into
// a compact struct passed by value (__grid_constant__, which TMA needs for its tensor maps).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "plan/plan.h"

namespace mlakit::sm90 {

struct DecodeParams {
  CUtensorMap q_map;   // q [b * s_q * h_q rows, 576], boxes of 64 rows x 64 columns, swizzle 128B
  CUtensorMap kv_map;  // kv [num_pages * page_size rows, 576], boxes of min(page, 64) rows x 64
  const int32_t* block_table;  // [b, block_table_stride] page ids
  int64_t block_table_stride;  // elements between rows of block_table
  const float* sinks;          // [h_q] or nullptr
  void* out;                   // [b, s_q, h_q, 512] of T
  float* lse;                  // [b, s_q, h_q] or nullptr
  plan::PlanView plan;         // metadata and partials in the workspace
  plan::Schedule schedule;
  const int32_t* seq_lens;    // [b]
  int32_t max_len;            // lengths are clamped to [0, max_len]
  int32_t inline_plan;        // 1: persistent, each CTA plans its part (plan/part_plan.cuh)
  int32_t fixed_cost_blocks;  // inline_plan: the plan shape's partition constants
  int32_t min_chunk_blocks;
  int32_t batch;
  int32_t h_q;
  int32_t s_q;
  int32_t rows;        // s_q * h_q
  int32_t page_shift;  // log2(page_size): 5, 6 or 7
  int32_t causal;      // 1 when s_q > 1 and causal: token t sees positions < L - s_q + 1 + t
  float scale_log2;    // softmax_scale * log2(e)
};

}  // namespace mlakit::sm90
