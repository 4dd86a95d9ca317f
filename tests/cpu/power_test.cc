// The power sampler on a machine without a GPU driver (CI): it says why it is unavailable and
// returns an empty reading; nothing fails. With a driver, tests/gpu/power_gpu_test.cc checks it.
#include "harness/power.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

namespace mlakit::harness {
namespace {

TEST(PowerSampler, EmptyReadingWithoutDriver) {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) GTEST_SKIP() << "a GPU is present";
  cudaGetLastError();
  PowerSampler sampler(0);
  EXPECT_FALSE(sampler.available());
  EXPECT_FALSE(sampler.why_not().empty());
  sampler.start();
  const PowerReading r = sampler.stop();
  EXPECT_EQ(r.samples, 0);
  EXPECT_EQ(r.sm_mhz, 0);
  EXPECT_EQ(r.power_w, 0);
  EXPECT_FALSE(r.power_capped);
}

TEST(PowerSampler, StopWithoutStart) {
  PowerSampler sampler(0);
  const PowerReading r = sampler.stop();
  EXPECT_EQ(r.samples, 0);
}

}  // namespace
}  // namespace mlakit::harness
