// When two losses are the same loss (loss_agreement.hpp): relative to the loss above 1, absolute below it, and a
// NaN never agrees, with anything.
#include <gtest/gtest.h>

#include <limits>

#include "engine/train/loss_agreement.hpp"

namespace fsdplab {
namespace {

TEST(LossAgreement, RelativeAboveOneAbsoluteBelow) {
  EXPECT_TRUE(agrees(10.00009, 10.0));  // 1e-5 relative: 1e-4 at 10
  EXPECT_FALSE(agrees(10.00011, 10.0));
  EXPECT_TRUE(agrees(0.100009, 0.1));  // 1e-5 absolute below 1
  EXPECT_FALSE(agrees(0.100011, 0.1));
  EXPECT_TRUE(agrees(5.4, 5.0, 0.1));  // a case's own tolerance
}

TEST(LossAgreement, ANaNNeverAgrees) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(agrees(nan, 1.0));
  EXPECT_FALSE(agrees(1.0, nan));
  EXPECT_FALSE(agrees(nan, nan));
}

}  // namespace
}  // namespace fsdplab
