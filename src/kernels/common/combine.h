// The combine kernel: merges the fp32 partial outputs of requests split into several chunks
// (split-KV) with their LSE weights, applies the sinks and writes out (bf16/fp16) and lse. It also
// writes the zeros (and -inf LSE) of empty requests. Requests with a single chunk were written by
// the main kernel and are skipped. Backend-neutral: any backend that plans with src/plan uses it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "mlakit/mlakit.h"
#include "plan/decode_params.h"
#include "plan/plan.h"

namespace mlakit {

struct CombineParams {
  const plan::RequestMeta* requests;  // [batch]
  const float* partial_lse;           // [max_slots, rows] natural log
  const float* partial_out;           // [max_slots, rows, 512]
  const float* sinks;                 // [h_q] or nullptr
  void* out;                          // [batch, rows, 512] of out_dtype, a view: out_view
  float* lse;                         // [batch, rows] or nullptr (contiguous)
  plan::RowView out_view;             // where row r of request i lies in out
  float lse_scale;                    // the written lse per natural-log unit (1 or log2(e))
  int32_t batch;
  int32_t rows;  // s_q * h_q; row r is (token r / h_q, head r % h_q)
  int32_t h_q;
};

// Launches the combine kernel on `stream`, sized for `sm_count` SMs (the CTAs loop over the
// rows); pdl: programmatic stream serialization (sm_90+).
Status launch_combine(const CombineParams& params, DType out_dtype, int32_t sm_count,
                      cudaStream_t stream, bool pdl);

// The combine of a decode kernel's partials: everything it needs is in the decode parameters.
inline Status launch_combine(const plan::DecodeParamsBase& d, DType out_dtype, int32_t sm_count,
                             cudaStream_t stream, bool pdl) {
  const CombineParams combine{.requests = d.plan.requests,
                              .partial_lse = d.plan.partial_lse,
                              .partial_out = d.plan.partial_out,
                              .sinks = d.sinks,
                              .out = d.out,
                              .lse = d.lse,
                              .out_view = d.out_view,
                              .lse_scale = d.lse_scale,
                              .batch = d.batch,
                              .rows = d.rows,
                              .h_q = d.h_q};
  return launch_combine(combine, out_dtype, sm_count, stream, pdl);
}

}  // namespace mlakit
