#include <gtest/gtest.h>

#include "mlakit/mlakit.h"

TEST(Smoke, CpuDecoderCreates) {
  mlakit::Problem p;
  p.max_seq_len = 128;
  std::unique_ptr<mlakit::Decoder> d;
  ASSERT_TRUE(mlakit::Decoder::create(p, {.backend = "cpu"}, &d).ok());
  EXPECT_EQ(d->backend_name(), "cpu");
}
