// Comparison of a backend's output against the reference, relative to the reference's magnitude.
#pragma once

#include <cstdint>
#include <string>

#include "mlakit/mlakit.h"

namespace mlakit::harness {

struct Comparison {
  int64_t count = 0;
  int64_t nonfinite = 0;   // NaN / inf in the tested output where the reference is finite
  double max_abs_err = 0;  // max |test - ref|
  double max_abs_ref = 0;  // max |ref|
  double rel_l2_err = 0;   // ||test - ref|| / ||ref||
  double lse_max_abs_err = 0;
  int64_t lse_mismatch = 0;  // -inf / finite disagreements and NaNs in lse

  // Passes when every element is finite, max_abs_err <= atol + rtol * max_abs_ref and the LSE
  // agrees within lse_atol.
  bool passes(double rtol, double atol, double lse_atol) const;
  std::string summary() const;  // "max err 1.2e-03 (ref max 4.1e-01), rel L2 2.3e-03"
};

// `test` and `ref` are outputs of `problem` for `batch` requests in out_dtype; `test_lse` and
// `ref_lse` may be null.
Comparison compare(const Problem& problem, int batch, const void* test, const void* ref,
                   const float* test_lse, const float* ref_lse);

// Default tolerances for a problem (why: see compare.cc).
struct Tolerance {
  double rtol, atol, lse_atol;
  double rel_l2 = 1.0;  // bound on rel_l2_err (callers that check it)
};
Tolerance default_tolerance(const Problem& problem);

}  // namespace mlakit::harness
