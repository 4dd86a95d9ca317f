// Running the cpu backend through the public API for the CPU tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "harness/workload.h"
#include "mlakit/mlakit.h"

namespace mlakit_test {

// The names every CPU test uses.
using mlakit::Decoder;
using mlakit::DType;
using mlakit::KvLayout;
using mlakit::Problem;
using mlakit::RunArgs;
using mlakit::Status;
using mlakit::StatusCode;
using mlakit::harness::HostInputs;

// A seed of its own for every test case (FNV-1a of the full test name), so that no two cases see
// the same inputs and a failure reproduces.
inline uint64_t case_seed() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = std::string(info->test_suite_name()) + "." + info->name();
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

// ---------------------------------------------------------------------------------------------
// Running the cpu backend and comparing with the reference
// ---------------------------------------------------------------------------------------------

struct CpuRun {
  mlakit::Status status;
  std::vector<uint8_t> out;  // [b, s_q, h_q, 512] of out_dtype
  std::vector<float> lse;    // [b, s_q, h_q]
};

// Runs the cpu backend on `in` through the public API, with out and lse poisoned with NaN first.
// `edit` may change the arguments (e.g. pass scales by pointer) before the run.
inline CpuRun run_cpu(const mlakit::harness::HostInputs& in,
                      const std::function<void(mlakit::RunArgs&)>& edit = {}) {
  CpuRun r;
  std::unique_ptr<mlakit::Decoder> decoder;
  r.status = mlakit::Decoder::create(in.problem, {.backend = "cpu"}, &decoder);
  if (!r.status.ok()) return r;
  r.out.resize(in.out_bytes());
  mlakit::harness::fill_nan(r.out.data(),
                            in.out_bytes() / mlakit::dtype_bytes(in.problem.out_dtype),
                            in.problem.out_dtype);
  r.lse.assign(in.lse_count(), std::numeric_limits<float>::quiet_NaN());
  mlakit::RunArgs args = in.args(r.out.data(), r.lse.data());
  if (edit) edit(args);
  r.status = decoder->run(args, nullptr, 0, nullptr);
  return r;
}

}  // namespace mlakit_test
