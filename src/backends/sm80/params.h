// The device parameters of the sm80 decode kernel: RunArgs and Problem lowered once per call
// into a compact struct passed by value (__grid_constant__).
#pragma once

#include <cstdint>

#include "plan/decode_params.h"

namespace mlakit::sm80 {

struct DecodeParams : plan::DecodeParamsBase {
  const void* q;   // [b, s_q, h_q, 576] of T (or e4m3: q_fp8); row r = t * h_q + h of a request
  const void* kv;  // [num_pages, page_size, 576] of T, or of e4m3 in the fp8 kernels
  // Views (RunArgs, "Views"; any outer strides), in elements: the loads address every row.
  plan::RowView q_view;
  plan::KvView kv_view;
  int32_t stages;       // KV pipeline depth, kMinStages..kMaxStages
  float scale;          // softmax_scale
  bool speculate;       // tactic 4: the persistent part planned before griddepcontrol.wait
  bool q_fp8;           // the fp8 kernels: q is e4m3, widened to T on its way into shared memory
  int32_t q_chunks;     // 16-byte chunks of a q row read (72; V4's d_qk 512: 64, the rest zeros)
  plan::V4Cache v4[2];  // V4 (Fp8Cache::kV4): the main and the extra cache (the main one twice)
};

// The e4m3 caches the fp8 kernels read (loads_fp8.cuh): one scale (Fp8KvLoader), or per-group
// scales in the V3.2 or V4 layout (ScaledKvLoader, sparse only).
enum class Fp8Cache { kOneScale, kBlockwise, kV4 };

}  // namespace mlakit::sm80
