// The power sampler with a driver: over a region with work on the GPU it reads a plausible SM
// clock and board power (times are not checked: no timing in unit tests).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "harness/power.h"

namespace mlakit::harness {
namespace {

TEST(PowerSamplerGpu, ReadsClockAndPower) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    GTEST_SKIP() << "no GPU";
  }
  PowerSampler sampler(0, 1);
  ASSERT_TRUE(sampler.available()) << sampler.why_not();
  sampler.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const PowerReading r = sampler.stop();
  EXPECT_GT(r.samples, 5);
  EXPECT_GT(r.sm_mhz, 100);
  EXPECT_LT(r.sm_mhz, 4000);
  // Instantaneous power is reported on Hopper; allow an older board that does not.
  if (r.power_w > 0) {
    EXPECT_GT(r.power_w, 20);
    EXPECT_LT(r.power_w, 2000);
  }
}

}  // namespace
}  // namespace mlakit::harness
