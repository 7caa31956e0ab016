// format_bytes (engine/runtime/byte_text.hpp): how every byte count reads, in the FSDP events' texts, the
// timeline's tooltips and the memory panel.
#include <gtest/gtest.h>

#include "engine/runtime/byte_text.hpp"

namespace fsdplab {
namespace {

TEST(ByteText, ThreeSignificantDigitsInDecimalUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1500), "1.50 kB");
  EXPECT_EQ(format_bytes(12'500), "12.5 kB");
  EXPECT_EQ(format_bytes(12'345'678), "12.3 MB");
  EXPECT_EQ(format_bytes(123'456'789), "123 MB");
  EXPECT_EQ(format_bytes(999'999), "1.00 MB");
  EXPECT_EQ(format_bytes(1'234'567'890), "1.23 GB");
  EXPECT_EQ(format_bytes(4'000'000'000), "4.00 GB");
  EXPECT_EQ(format_bytes(80'000'000'000), "80.0 GB");
  EXPECT_EQ(format_bytes(-1500), "-1.50 kB");
}

}  // namespace
}  // namespace fsdplab
