#include "app/dashboard/timeline_format.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "app/axis_step.hpp"

namespace fsdplab::app {
namespace {

constexpr const char* kMicro = "\xC2\xB5s";  // µs in UTF-8 (the default font has Latin-1)

std::string printf_string(const char* format, double value, const char* unit) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value, unit);
  return buffer;
}

}  // namespace

std::string format_duration(SimTime ns) {
  const double v = static_cast<double>(ns);
  const double a = std::abs(v);
  if (a < 1e3) return printf_string("%.0f %s", v, "ns");
  if (a < 1e6) return printf_string("%.2f %s", v / 1e3, kMicro);
  if (a < 1e9) return printf_string("%.3f %s", v / 1e6, "ms");
  return printf_string("%.3f %s", v / 1e9, "s");
}

std::string format_instant(SimTime ns) {
  const double v = static_cast<double>(ns);
  const double a = std::abs(v);
  if (a < 1e3) return printf_string("%.0f %s", v, "ns");
  if (a < 1e6) return printf_string("%.3f %s", v / 1e3, kMicro);
  if (a < 1e9) return printf_string("%.6f %s", v / 1e6, "ms");
  return printf_string("%.9f %s", v / 1e9, "s");
}

std::string TimeUnit::number(double milliseconds, int decimals) const {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, milliseconds / ms);
  return buf;
}

std::string TimeUnit::text(double milliseconds, int decimals) const {
  return number(milliseconds, decimals) + " " + name;
}

TimeUnit time_unit_for(double largest_ms) {
  constexpr double kSecondsFromMs = 10'000;
  return largest_ms >= kSecondsFromMs ? TimeUnit{"s", 1000} : TimeUnit{};
}

std::string format_count(std::uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  out.reserve(digits.size() + digits.size() / 3);
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

double tick_step(double ns_per_pixel, double target_pixels) {
  return nice_ceil(std::max(ns_per_pixel * target_pixels, 1.0));
}

std::string format_tick(double t, double step, double magnitude) {
  // One unit for the whole axis, from the largest time it shows; decimals enough to tell ticks `step`
  // apart in it (5.00002 s beside 5.00004 s at a deep zoom, 1.2 ms beside 1.4 ms).
  const double m = std::max({std::abs(magnitude), step, 1.0});
  double unit = 1;
  const char* name = "ns";
  if (m >= 1e9) {
    unit = 1e9, name = "s";
  } else if (m >= 1e6) {
    unit = 1e6, name = "ms";
  } else if (m >= 1e3) {
    unit = 1e3, name = kMicro;
  }
  const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step / unit) - 1e-9)), 0, 9);
  double value = t / unit;
  if (std::abs(value) < 0.5 * std::pow(10.0, -decimals)) value = 0;  // no "-0.0"
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f %s", decimals, value, name);
  return buffer;
}

}  // namespace fsdplab::app
