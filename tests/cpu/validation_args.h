// The valid calls that the validate_args tests (validation_args_test.cc,
// validation_buffers_test.cc) mutate: a base problem of each kind, with real inputs for it.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "cpu_run.h"
#include "harness/workload.h"
#include "mlakit/mlakit.h"

namespace mlakit_test {

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A valid scale to point at.
alignas(256) inline const float kScale = 0.5f;

enum class Base { kDense, kSinksLse, kSparse, kFp8, kFp8Q, kBlockwise, kV4Extra };
inline Problem base_problem(Base base) {
  Problem p{.h_q = 4, .page_size = 16, .max_batch = 2, .max_seq_len = 64};
  switch (base) {
    case Base::kDense: break;
    case Base::kSinksLse: p.has_sinks = p.return_lse = true; break;
    case Base::kSparse: p.topk = 8; break;
    case Base::kFp8: p.kv_dtype = DType::kFP8E4M3; break;
    case Base::kFp8Q: p.kv_dtype = p.q_dtype = DType::kFP8E4M3; break;
    case Base::kBlockwise:
      p.kv_dtype = DType::kFP8E4M3;
      p.kv_layout = KvLayout::kFp8Blockwise;
      break;
    case Base::kV4Extra:
      p.kv_dtype = DType::kFP8E4M3;
      p.kv_layout = KvLayout::kFp8V4;
      p.d_qk = 512;
      p.topk = 8;
      p.extra_topk = 4;
      p.extra_page_size = 2;
      break;
  }
  return p;
}

// A valid call: real inputs (so that a rule that wrongly let a call through could still run).
struct ValidCall {
  explicit ValidCall(Base base)
      : in(mlakit::harness::make_inputs(base_problem(base), std::vector<int32_t>{5, 40},
                                        {.seed = 17, .topk_lens = true})),
        out(in.out_bytes()),
        lse(in.lse_count()),
        args(in.args(out.data(), lse.data())) {}
  mlakit::harness::HostInputs in;
  std::vector<uint8_t> out;
  std::vector<float> lse;
  RunArgs args;
};

}  // namespace mlakit_test
