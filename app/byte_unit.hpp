// byte_unit.hpp — the unit a table of bytes is written in, chosen once per table: GB (10^9 bytes) as the writeup's
// tables and the FSDP lecture have it, MB (10^6 bytes) where the table's largest figure is under a GB (the test
// presets and small models, whose gigabytes would all read 0.000).
#pragma once
#include <cstdint>
#include <string>

namespace fsdplab::app {

class ByteUnit {
 public:
  // The unit for a table whose largest figure is `largest` bytes.
  static ByteUnit for_largest(std::int64_t largest) { return ByteUnit(largest >= 1'000'000'000); }

  const char* name() const { return giga_ ? "GB" : "MB"; }
  // "GB = 10^9 bytes": the definition each table's note gives.
  std::string definition() const { return giga_ ? "GB = 10^9 bytes" : "MB = 10^6 bytes"; }
  // `bytes` in this unit.
  double of(std::int64_t bytes) const { return static_cast<double>(bytes) / (giga_ ? 1e9 : 1e6); }

 private:
  explicit ByteUnit(bool giga) : giga_(giga) {}
  bool giga_;
};

}  // namespace fsdplab::app
