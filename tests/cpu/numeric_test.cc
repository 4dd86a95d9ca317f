// Storage conversions (src/core/numeric.h) against the test's own decoders in
// naive_reference.h: every bit pattern, and rounding at midpoints.
#include "core/numeric.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "naive_reference.h"

namespace mlakit_test {
namespace {

// The library's decode of every bit pattern equals the test's, and encoding it gives the pattern
// back; NaN patterns stay NaN.
template <typename Bits>
void expect_round_trips(int count, float (*to_float)(Bits), Bits (*from_float)(float),
                        double (*reference)(Bits)) {
  for (int b = 0; b < count; ++b) {
    const Bits bits = static_cast<Bits>(b);
    const float f = to_float(bits);
    const double r = reference(bits);
    if (std::isnan(r)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << "0x" << b << " decodes to " << f;
      EXPECT_TRUE(std::isnan(reference(from_float(f)))) << std::hex << "0x" << b;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), r) << std::hex << "0x" << b;
    ASSERT_EQ(std::signbit(f), std::signbit(r)) << std::hex << "0x" << b;
    ASSERT_EQ(from_float(f), bits) << std::hex << "0x" << b << " = " << f;
  }
}

TEST(Numeric, E4m3AllValuesRoundTrip) {
  expect_round_trips<uint8_t>(256, mlakit::e4m3_to_float, mlakit::float_to_e4m3, decode_e4m3);
}

TEST(Numeric, Bf16AllValuesRoundTrip) {
  expect_round_trips<uint16_t>(65536, mlakit::bf16_to_float, mlakit::float_to_bf16, decode_bf16);
}

TEST(Numeric, Fp16AllValuesRoundTrip) {
  expect_round_trips<uint16_t>(65536, mlakit::fp16_to_float, mlakit::float_to_fp16, decode_fp16);
}

// Round to nearest, ties to even, at every midpoint between adjacent finite values (and just
// either side of it), both signs. `last` is the largest finite positive pattern; `above_last` what
// values beyond it become (infinity, or the largest finite value for the saturating e4m3fn).
template <typename Bits>
void expect_ties_to_even(Bits last, Bits above_last, Bits sign, Bits (*from_float)(float),
                         double (*reference)(Bits)) {
  for (int b = 0; b <= last; ++b) {
    const double lo = reference(static_cast<Bits>(b));
    // Past the largest finite value, the next value of the same spacing.
    const double hi = b < last ? reference(static_cast<Bits>(b + 1))
                               : 2 * lo - reference(static_cast<Bits>(b - 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2) << "midpoint not exact in float";
    const Bits up = b < last ? static_cast<Bits>(b + 1) : above_last;
    const Bits even = b % 2 == 0 ? static_cast<Bits>(b) : up;
    for (const Bits s : {Bits{0}, sign}) {
      const float m = s ? -mid : mid, away = s ? -INFINITY : INFINITY;
      const auto with_sign = [&](int bits) { return static_cast<Bits>(s | bits); };
      ASSERT_EQ(from_float(m), with_sign(even)) << std::hex << "midpoint after 0x" << b;
      ASSERT_EQ(from_float(std::nextafter(m, 0.0f)), with_sign(b)) << std::hex << "below 0x" << b;
      ASSERT_EQ(from_float(std::nextafter(m, away)), with_sign(up)) << std::hex << "above 0x" << b;
      ASSERT_EQ(from_float(s ? -static_cast<float>(lo) : static_cast<float>(lo)), with_sign(b));
    }
  }
}

TEST(Numeric, Bf16RoundsToNearestEven) {
  expect_ties_to_even<uint16_t>(0x7f7f, 0x7f80, 0x8000, mlakit::float_to_bf16, decode_bf16);
  struct Known {
    float value;
    uint16_t bits;
  };
  for (const Known& k :
       {Known{1.0f, 0x3f80}, Known{1.0f + 0x1p-8f, 0x3f80}, Known{1.0f + 3 * 0x1p-8f, 0x3f82},
        Known{1.0f + 0x1p-8f + 0x1p-20f, 0x3f81}, Known{-2.5f, 0xc020}, Known{-0.0f, 0x8000},
        Known{FLT_MAX, 0x7f80}, Known{INFINITY, 0x7f80}, Known{-INFINITY, 0xff80}}) {
    EXPECT_EQ(mlakit::float_to_bf16(k.value), k.bits) << k.value;
  }
  EXPECT_TRUE(std::isnan(decode_bf16(mlakit::float_to_bf16(NAN))));
}

TEST(Numeric, Fp16RoundsToNearestEven) {
  expect_ties_to_even<uint16_t>(0x7bff, 0x7c00, 0x8000, mlakit::float_to_fp16, decode_fp16);
  struct Known {
    float value;
    uint16_t bits;
  };
  for (const Known& k :
       {Known{1.0f, 0x3c00}, Known{0.1f, 0x2e66}, Known{-2.0f, 0xc000}, Known{65504.0f, 0x7bff},
        Known{65519.0f, 0x7bff}, Known{65520.0f, 0x7c00}, Known{1.0f + 0x1p-11f, 0x3c00},
        Known{0x1p-24f, 0x0001}, Known{0x1p-25f, 0x0000}, Known{3 * 0x1p-25f, 0x0002},
        Known{1023.5f * 0x1p-24f, 0x0400}, Known{1e-10f, 0x0000}, Known{-0.0f, 0x8000},
        Known{INFINITY, 0x7c00}, Known{-1e30f, 0xfc00}}) {
    EXPECT_EQ(mlakit::float_to_fp16(k.value), k.bits) << k.value;
  }
  EXPECT_TRUE(std::isnan(decode_fp16(mlakit::float_to_fp16(NAN))));
}

TEST(Numeric, E4m3RoundsToNearestEvenAndSaturates) {
  // Beyond 448 e4m3fn saturates (as the CUDA conversion with satfinite does), infinity included.
  expect_ties_to_even<uint8_t>(0x7e, 0x7e, 0x80, mlakit::float_to_e4m3, decode_e4m3);
  struct Known {
    float value;
    uint8_t bits;
  };
  for (const Known& k :
       {Known{1.0f, 0x38}, Known{0.1f, 0x1d}, Known{1.0625f, 0x38}, Known{1.1875f, 0x3a},
        Known{15.5f, 0x58}, Known{448.0f, 0x7e}, Known{-448.0f, 0xfe}, Known{500.0f, 0x7e},
        Known{1e9f, 0x7e}, Known{INFINITY, 0x7e}, Known{-INFINITY, 0xfe}, Known{0x1p-9f, 0x01},
        Known{0x1p-10f, 0x00}, Known{3 * 0x1p-10f, 0x02}, Known{7.5f * 0x1p-9f, 0x08},
        Known{-0.0f, 0x80}}) {
    EXPECT_EQ(mlakit::float_to_e4m3(k.value), k.bits) << k.value;
  }
  EXPECT_TRUE(std::isnan(decode_e4m3(mlakit::float_to_e4m3(NAN))));
}

}  // namespace
}  // namespace mlakit_test
