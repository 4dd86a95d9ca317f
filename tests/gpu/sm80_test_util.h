// Shared pieces of the GPU backend tests (sm80, sm90): cases, the cpu reference, runs on the
// device.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
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

// The sm90 backend runs on sm_90 devices only; elsewhere it refuses every problem.
#define MLAKIT_SKIP_WITHOUT_SM90()                                            \
  do {                                                                        \
    const ::mlakit::DeviceInfo skip_device_ = ::mlakit::current_device();     \
    if (!skip_device_.present) GTEST_SKIP() << "no CUDA device found";        \
    if (skip_device_.sm_major != 9) {                                         \
      GTEST_SKIP() << "not an sm_90 device: " << skip_device_.name << " (sm_" \
                   << skip_device_.sm_major << skip_device_.sm_minor << ")";  \
    }                                                                         \
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

// A stream for one test, destroyed with it.
struct StreamHolder {
  cudaStream_t stream = nullptr;
  StreamHolder() { cudaStreamCreate(&stream); }
  ~StreamHolder() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  StreamHolder(const StreamHolder&) = delete;
  StreamHolder& operator=(const StreamHolder&) = delete;
};

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
  // An e4m3 cache (one scale); with fp8_q also an e4m3 q. dtype is then the output's (and q's
  // when it is not fp8).
  bool fp8_kv = false;
  bool fp8_q = false;
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
// The same with any launch on `stream` (a backend's own run, say) in place of the decoder's.
Status run_device(const std::function<Status(cudaStream_t)>& run, const harness::HostInputs& in,
                  const harness::DeviceInputs& device, cudaStream_t stream, Output* got);

// Compares against the reference with harness::default_tolerance (or `tolerance`); returns the
// summary. var_q: the packed rows, and no element past them written (got poisoned before).
::testing::AssertionResult matches_reference(const harness::HostInputs& in, const Output& got,
                                             const Output& ref);
::testing::AssertionResult matches_reference(const harness::HostInputs& in, const Output& got,
                                             const Output& ref,
                                             const harness::Tolerance& tolerance);

// Runs case `c` (inputs from `seed`) on `backend` with tactic c.tactic and compares every element
// with the cpu reference (harness::default_tolerance, or `tolerance`); prints one line per case.
void check_case(const Case& c, uint64_t seed, const char* backend,
                const harness::Tolerance* tolerance = nullptr);

// Case `c` (inputs from `seed`, values `magnitude` times N(0, 1)) on `backend` with tactic
// c.tactic against the cpu reference: the comparison itself, for tests of the error's size.
Status compare_case(const Case& c, uint64_t seed, const char* backend, float magnitude,
                    harness::Comparison* cmp);

// The ids of every tactic `backend` offers for `p`.
std::vector<int> tactic_ids(const char* backend, const Problem& p);

// check_case for each case in turn, with seeds seed, seed + 1, ...
void check_cases(std::span<const Case> cases, uint64_t seed, const char* backend,
                 const harness::Tolerance* tolerance = nullptr);
// check_case for each case with every tactic of the backend in turn, seeds seed, seed + 1, ...
void check_each_tactic(std::span<const Case> cases, uint64_t seed, const char* backend);

// Edges beyond the sweeps (the .cc says what each probes): long single requests, lengths shorter
// than s_q, non-causal MTP, all empty, 1100 requests, odd head counts. With sm80's page sizes
// (64, 16, 1, 32); a backend that runs other ones maps them.
std::vector<Case> common_edges();
// MTP with 9..16 query tokens (up to 2048 rows a request), page sizes 32, 64, 128: the most rows,
// 32-row tiles, one row per token, lengths below s_q, partial tiles, non-causal.
std::vector<Case> long_mtp_cases();
// The fp8 forms of `cases`: each with an e4m3 cache (bf16 or fp16 q), then each again with an
// e4m3 q, in that order.
std::vector<Case> with_fp8(std::vector<Case> cases);

// A problem that `backend` must refuse (StatusCode::kUnsupported), with a word its message names.
struct Refusal {
  Problem problem;
  const char* mentions;
};
// What no GPU backend runs on a dense problem: the fp8 blockwise cache ("kv_layout"), and an extra
// cache with a dense cache ("extra cache"; sm90 runs one with the V4 layout only), each on a
// default problem with max_seq_len 1024.
std::vector<Refusal> common_refusals();
// Expects can_run(backend, r.problem) to refuse each with kUnsupported, naming r.mentions.
void expect_refused(const char* backend, const std::vector<Refusal>& refusals);

// A run with a workspace one byte smaller than workspace_bytes() fails with kInvalidArgument
// naming "workspace_size".
void check_workspace_too_small_is_refused(const char* backend);

// For the disabled timing tests: MLAKIT_TIMING_SHAPES=0,4 selects entries of their shape lists
// (e.g. to profile one of them); unset selects all.
bool timing_shape_selected(int index);

// Bitwise equality of two outputs.
::testing::AssertionResult bitwise_equal(const Output& a, const Output& b);

}  // namespace mlakit::testing
