// Shared pieces of the sm80 GPU tests: cases, the cpu reference, runs on the device.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/compare.h"
#include "harness/workload.h"
#include "mlakit/mlakit.h"

namespace mlakit::testing {

#define MLAKIT_SKIP_WITHOUT_GPU()                                                    \
  do {                                                                               \
    if (!::mlakit::current_device().present) GTEST_SKIP() << "no CUDA device found"; \
  } while (0)

#define MLAKIT_ASSERT_OK(expr)                                            \
  do {                                                                    \
    const ::mlakit::Status assert_ok_status_ = (expr);                    \
    ASSERT_TRUE(assert_ok_status_.ok()) << assert_ok_status_.to_string(); \
  } while (0)

#define MLAKIT_ASSERT_CUDA(expr)                                  \
  do {                                                            \
    const cudaError_t assert_cuda_err_ = (expr);                  \
    ASSERT_EQ(assert_cuda_err_, cudaSuccess)                      \
        << #expr << ": " << cudaGetErrorString(assert_cuda_err_); \
  } while (0)

// Sequence lengths of a case: all equal; variable (uniform in [L/8, 2L), with a 0 and a 1); or
// skewed (one request 50x longer than the rest, plus a 0 and a 1).
enum class Lens { kFixed, kVariable, kSkewed };

struct Case {
  DType dtype = DType::kBF16;
  int page_size = 64;
  int h_q = 16;
  int s_q = 1;
  Lens lens = Lens::kFixed;
  bool sinks = false;
  bool lse = false;
  int tactic = 0;
  int batch = 0;  // 0: by lens (fixed 3, variable 6, skewed 5)
  int len = -1;   // -1: by rows and lens
  bool causal = true;
};

std::string case_name(const Case& c);
std::vector<int32_t> case_lengths(const Case& c, uint64_t seed);
Problem case_problem(const Case& c, const std::vector<int32_t>& lens);

// Output of one run on the host.
struct Output {
  std::vector<uint16_t> out;  // [b, s_q, h_q, 512] bf16/fp16 bits
  std::vector<float> lse;     // [b, s_q, h_q] when the problem returns it
};

// The cpu backend on the host inputs.
Status cpu_reference(const harness::HostInputs& in, Output* ref);

// Poisons out/lse, runs `decoder` on `device` inputs, synchronizes and downloads.
Status run_device(const Decoder& decoder, const harness::HostInputs& in,
                  const harness::DeviceInputs& device, void* workspace, cudaStream_t stream,
                  Output* got);

// Compares against the reference with harness::default_tolerance; returns the summary.
::testing::AssertionResult matches_reference(const harness::HostInputs& in, const Output& got,
                                             const Output& ref);

// For the disabled timing tests: MLAKIT_TIMING_SHAPES=0,4 selects entries of their shape lists
// (e.g. to profile one of them); unset selects all.
bool timing_shape_selected(int index);

// Bitwise equality of two outputs.
::testing::AssertionResult bitwise_equal(const Output& a, const Output& b);

}  // namespace mlakit::testing
