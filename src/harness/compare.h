// Comparison of a backend's output against the reference, relative to the reference's magnitude.
#pragma once

#include <cstdint>
#include <string>

#include "mlakit/mlakit.h"

namespace mlakit::harness {

// Default tolerances for a problem (why: see compare.cc).
struct Tolerance {
  double rtol, atol, lse_atol;
  double rel_l2 = 1.0;  // bound on rel_l2_err
};
Tolerance default_tolerance(const Problem& problem);

struct Comparison {
  int64_t count = 0;
  int64_t nonfinite = 0;   // NaN / inf in the tested output where the reference is finite
  double max_abs_err = 0;  // max |test - ref|
  double max_abs_ref = 0;  // max |ref|
  double rel_l2_err = 0;   // ||test - ref|| / ||ref||
  double lse_max_abs_err = 0;
  int64_t lse_mismatch = 0;  // -inf / finite disagreements and NaNs in lse
  // var_q: elements of out and lse past the packed rows that are no longer NaN (written: a run
  // may not touch them; the outputs are poisoned with NaN before it).
  int64_t written_past = 0;

  // Passes when every element is finite, max_abs_err <= atol + rtol * max_abs_ref, rel_l2_err <=
  // rel_l2, the LSE agrees within lse_atol and nothing past the packed rows was written.
  bool passes(const Tolerance& tolerance) const;
  std::string summary() const;  // "max err 1.2e-03 (ref max 4.1e-01), rel L2 2.3e-03"
};

// `test` and `ref` are outputs of `problem` for `batch` requests in out_dtype; `test_lse` and
// `ref_lse` may be null. var_q: `tokens` is the packed rows' count (cu_seqlens_q[b]); only those
// are compared, and the rest of the b * s_q rows of `test` must still be NaN. -1: b * s_q.
Comparison compare(const Problem& problem, int batch, const void* test, const void* ref,
                   const float* test_lse, const float* ref_lse, int64_t tokens = -1);

}  // namespace mlakit::harness
