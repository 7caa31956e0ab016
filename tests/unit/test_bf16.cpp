// float <-> bf16 conversion at the edges: ties to even both ways, just above and below a tie,
// overflow to infinity, infinities, NaN, signed zero, subnormals, and every bf16 bit pattern.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/tensor/bf16.hpp"

namespace fsdplab {
namespace {

std::uint16_t to_bf16(std::uint32_t float_bits) { return float_to_bf16(std::bit_cast<float>(float_bits)); }
bool is_nan_bits(std::uint16_t b) { return (b & 0x7F80u) == 0x7F80u && (b & 0x007Fu) != 0; }

TEST(Bf16, TiesRoundToEvenBothWays) {
  // 1 + 2^-8 (0x3F808000) lies halfway between 0x3F80 and 0x3F81: down, to the even 0x3F80.
  EXPECT_EQ(to_bf16(0x3F808000u), 0x3F80u);
  // 0x3F818000 lies halfway between 0x3F81 and 0x3F82: up, to the even 0x3F82.
  EXPECT_EQ(to_bf16(0x3F818000u), 0x3F82u);
  // The same for negative values: the sign does not change the direction in magnitude.
  EXPECT_EQ(to_bf16(0xBF808000u), 0xBF80u);
  EXPECT_EQ(to_bf16(0xBF818000u), 0xBF82u);
}

TEST(Bf16, JustAboveOrBelowATieRoundsToTheNearer) {
  EXPECT_EQ(to_bf16(0x3F808001u), 0x3F81u);  // above the tie: up, although 0x3F80 is even
  EXPECT_EQ(to_bf16(0x3F807FFFu), 0x3F80u);  // below the tie: down
  EXPECT_EQ(to_bf16(0x3F818001u), 0x3F82u);
  EXPECT_EQ(to_bf16(0x3F817FFFu), 0x3F81u);  // below the tie: down, although 0x3F81 is odd
  EXPECT_EQ(to_bf16(0x3F80FFFFu), 0x3F81u);  // a carry out of the dropped bits
  EXPECT_EQ(to_bf16(0x3FFFFFFFu), 0x4000u);  // ... that carries into the exponent: 2.0
}

TEST(Bf16, LargeValuesRoundToInfinity) {
  EXPECT_EQ(to_bf16(0x7F7FFFFFu), 0x7F80u);  // the largest finite f32 is nearer bf16's "next" value: inf
  EXPECT_EQ(to_bf16(0x7F7F8000u), 0x7F80u);  // a tie above bf16's largest finite (odd 0x7F7F): up, to inf
  EXPECT_EQ(to_bf16(0x7F7F7FFFu), 0x7F7Fu);  // just below that tie: bf16's largest finite value
  EXPECT_EQ(to_bf16(0xFF7FFFFFu), 0xFF80u);  // and negative, to -inf
  EXPECT_EQ(bf16_to_float(0x7F7Fu), 0x1.FEp127f);
}

TEST(Bf16, InfinitiesAndNaN) {
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80u);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80u);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::quiet_NaN()), 0x7FC0u);
  // NaNs whose payload lies only in the dropped bits: plain rounding would make the first +inf and
  // carry the others into the sign bit or to zero. They must stay NaN, with their sign.
  for (std::uint32_t nan : {0x7F800001u, 0x7FFFFFFFu, 0xFF800001u, 0xFFFFFFFFu, 0x7F808000u}) {
    SCOPED_TRACE(nan);
    const std::uint16_t b = to_bf16(nan);
    EXPECT_TRUE(is_nan_bits(b));
    EXPECT_EQ(b & 0x8000u, (nan >> 16) & 0x8000u);
    EXPECT_TRUE(std::isnan(bf16_to_float(b)));
  }
  EXPECT_TRUE(std::isinf(bf16_to_float(0x7F80u)) && bf16_to_float(0x7F80u) > 0);
  EXPECT_TRUE(std::isinf(bf16_to_float(0xFF80u)) && bf16_to_float(0xFF80u) < 0);
}

TEST(Bf16, SignedZero) {
  EXPECT_EQ(float_to_bf16(0.f), 0x0000u);
  EXPECT_EQ(float_to_bf16(-0.f), 0x8000u);
  EXPECT_TRUE(std::signbit(bf16_to_float(0x8000u)));
  EXPECT_EQ(bf16_to_float(0x8000u), 0.f);
}

TEST(Bf16, Subnormals) {
  // bf16 has f32's exponent range, so f32 subnormals round like any other value.
  EXPECT_EQ(to_bf16(0x00000001u), 0x0000u);  // the smallest f32 subnormal: to +0
  EXPECT_EQ(to_bf16(0x80000001u), 0x8000u);  // and -0
  EXPECT_EQ(to_bf16(0x00008000u), 0x0000u);  // a tie with even 0: down
  EXPECT_EQ(to_bf16(0x00018000u), 0x0002u);  // a tie with odd 1: up
  EXPECT_EQ(to_bf16(0x00008001u), 0x0001u);  // above a tie: the smallest bf16 subnormal
  EXPECT_EQ(to_bf16(0x007FFFFFu), 0x0080u);  // the largest f32 subnormal rounds up to the smallest normal
  EXPECT_EQ(bf16_to_float(0x0001u), 0x1p-133f);
  EXPECT_EQ(bf16_to_float(0x807Fu), -0x1.FCp-127f);
}

TEST(Bf16, EveryBitPatternRoundTrips) {
  int nans = 0;
  for (std::uint32_t bits = 0; bits <= 0xFFFFu; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    const std::uint16_t back = float_to_bf16(bf16_to_float(b));
    if (is_nan_bits(b)) {
      ++nans;
      ASSERT_TRUE(is_nan_bits(back)) << std::hex << bits;
      ASSERT_EQ(back, b | 0x0040u) << std::hex << bits;  // quieted, sign and payload kept
    } else {
      ASSERT_EQ(back, b) << std::hex << bits;
    }
  }
  EXPECT_EQ(nans, 2 * 127);  // 7 mantissa bits not all zero, two signs
}

TEST(Bf16, RoundToBf16IsIdempotentAndNearest) {
  for (float x : {0.1f, -3.14159f, 1e-30f, 65504.f, 1e38f}) {
    const float r = round_to_bf16(x);
    EXPECT_EQ(round_to_bf16(r), r);
    EXPECT_LE(std::abs(r - x), std::abs(x) * 0x1p-8f) << x;  // half a bf16 ulp: 2^-8 of 2^floor(log2|x|)
  }
}

}  // namespace
}  // namespace fsdplab
