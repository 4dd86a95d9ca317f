// Comparing a cpu backend run with the float64 reference of naive_reference.h, for the cpu backend
// tests (cpu_backend_test.cc, cpu_backend_edges_test.cc): the tolerance, why it is what it is, and
// a report with the max error and the relative L2 error.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu_run.h"
#include "mlakit/mlakit.h"
#include "naive_reference.h"

namespace mlakit_test {

inline constexpr int kDv = mlakit::kDv;
inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline double decode_out(const std::vector<uint8_t>& out, int64_t k, DType dtype) {
  uint16_t bits;
  std::memcpy(&bits, out.data() + 2 * k, sizeof(bits));
  return dtype == DType::kBF16 ? decode_bf16(bits) : decode_fp16(bits);
}

// One unit in the last place of `x` in the output type (bf16: 8 significant bits, fp16: 11, with
// subnormals spaced 2^-24).
inline double ulp_of(double x, DType dtype) {
  if (x == 0) return 0;
  int e;
  std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1): the ulp is 2^(e - significant bits)
  return dtype == DType::kBF16 ? std::ldexp(1.0, e - 8)
                               : std::max(std::ldexp(1.0, e - 11), 0x1p-24);
}

// Tolerance. The cpu backend computes in float32 (dot products over 576 values, a two-pass
// softmax with a float64 denominator, sums over at most a few thousand tokens): its value before
// the final store is within a few 1e-6 of max|ref| of the float64 reference at these shapes. It
// then rounds once to bf16 / fp16, an error of at most half an ulp of the element, hence at most
// half an ulp of max|ref|. So the bound is one ulp of the output type at max|ref| (a factor 2 of
// margin over the rounding for the float32 arithmetic), plus 1e-6 absolute for rows whose values
// are all tiny. Rows with no visible token must be exactly 0 (lse -inf). The lse is float32 of a
// value of magnitude < ~30: within 1e-4 absolute.
//
// That bound is the one GPU backends are held to; it cannot tell rounding from truncation. As the
// oracle, the cpu backend must also round each element to nearest: within half an ulp of the
// element itself plus the float32 arithmetic, 1e-4 * max|ref| (observed: below 4e-6 * max|ref|
// over this suite; truncating instead of rounding exceeds it by far).
inline constexpr double kAbsTolerance = 1e-6;
inline constexpr double kFloat32Slack = 1e-4;
inline constexpr double kLseTolerance = 1e-4;

inline ::testing::AssertionResult matches_reference(const HostInputs& in, const CpuRun& run,
                                                    const NaiveResult& ref) {
  const Problem& p = in.problem;
  const int64_t rows = static_cast<int64_t>(in.batch) * p.s_q * p.h_q;
  double max_ref = 0;
  for (const double r : ref.out) max_ref = std::max(max_ref, std::fabs(r));
  const double bound = ulp_of(max_ref, p.out_dtype) + kAbsTolerance;

  int64_t nonfinite = 0, over = 0, misrounded = 0, nonzero_empty = 0, worst = 0;
  int64_t first_nonfinite = -1;
  double max_err = 0, err2 = 0, ref2 = 0;
  for (int64_t k = 0; k < rows * kDv; ++k) {
    const double t = decode_out(run.out, k, p.out_dtype), r = ref.out[k];
    if (!std::isfinite(t)) {
      if (nonfinite++ == 0) first_nonfinite = k;
      continue;
    }
    if (std::isinf(ref.lse[k / kDv]) && t != 0) ++nonzero_empty;
    const double e = std::fabs(t - r);
    over += e > bound;
    const double half_ulp = 0.5 * ulp_of(std::max(std::fabs(t), std::fabs(r)), p.out_dtype);
    misrounded += e > half_ulp + kFloat32Slack * max_ref + kAbsTolerance;
    if (e > max_err) max_err = e, worst = k;
    err2 += e * e;
    ref2 += r * r;
  }
  const double rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);

  int64_t lse_bad = 0;
  double lse_err = 0;
  if (p.return_lse) {
    for (int64_t k = 0; k < rows; ++k) {
      const double t = run.lse[k], r = ref.lse[k];
      if (std::isinf(r)) {
        lse_bad += !(t == r);
        continue;
      }
      const double e = std::isfinite(t) ? std::fabs(t - r) : kInf;
      lse_err = std::max(lse_err, e);
      lse_bad += !(e <= kLseTolerance);
    }
  }

  char summary[512];
  std::snprintf(summary, sizeof(summary),
                "max err %.3e (bound %.3e = 1 ulp at max|ref| %.3e + %.0e), rel L2 %.3e, "
                "%lld over the bound, %lld not rounded to nearest, %lld non-finite, %lld nonzero "
                "in empty rows; lse max err %.3e, %lld lse mismatches",
                max_err, bound, max_ref, kAbsTolerance, rel_l2, static_cast<long long>(over),
                static_cast<long long>(misrounded), static_cast<long long>(nonfinite),
                static_cast<long long>(nonzero_empty), lse_err, static_cast<long long>(lse_bad));
  if (over == 0 && misrounded == 0 && nonfinite == 0 && nonzero_empty == 0 && lse_bad == 0) {
    return ::testing::AssertionSuccess() << summary;
  }
  const int64_t at = first_nonfinite >= 0 ? first_nonfinite : worst, row = at / kDv;
  return ::testing::AssertionFailure()
         << summary << "\n  " << (first_nonfinite >= 0 ? "first non-finite" : "worst") << " at [b "
         << row / (p.s_q * p.h_q) << ", t " << row / p.h_q % p.s_q << ", h " << row % p.h_q
         << ", d " << at % kDv << "]: cpu " << decode_out(run.out, at, p.out_dtype)
         << ", reference " << ref.out[at] << "\n  problem: " << mlakit::describe(p);
}

}  // namespace mlakit_test
