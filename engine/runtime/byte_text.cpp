#include "engine/runtime/byte_text.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace fsdplab {

std::string format_bytes(std::int64_t bytes) {
  if (std::abs(bytes) < 1000) return std::to_string(bytes) + " B";
  static constexpr std::array<const char*, 4> kUnits = {"kB", "MB", "GB", "TB"};
  std::size_t u = 0;
  double scaled = static_cast<double>(bytes) / 1e3;
  while (u + 1 < kUnits.size() && std::abs(scaled) >= 999.5) {  // 999,999 B is "1.00 MB", not "1000 kB"
    scaled /= 1e3;
    ++u;
  }
  const double a = std::abs(scaled);
  char text[32];
  std::snprintf(text, sizeof text, a >= 99.95 ? "%.0f %s" : a >= 9.995 ? "%.1f %s" : "%.2f %s", scaled, kUnits[u]);
  return text;
}

}  // namespace fsdplab
