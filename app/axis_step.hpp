// axis_step.hpp — the step between an axis's ticks, as every plot of fsdplab picks it: 1, 2 or 5 times a power of
// ten (the timeline's time axis, the step-time panel's milliseconds and step numbers, the report's figures).
#pragma once
#include <cmath>

namespace fsdplab::app {

// The least of 1, 2 or 5 times a power of ten that is at least `x` (1 for x <= 0). A value a rounding short of
// such a number is that number: 0.30000000000000004 / 3 steps at 0.1.
inline double nice_ceil(double x) {
  if (!(x > 0)) return 1;
  const double decade = std::pow(10.0, std::floor(std::log10(x)));
  for (const double m : {1.0, 2.0, 5.0})
    if (m * decade >= x * (1 - 1e-9)) return m * decade;
  return 10 * decade;
}

}  // namespace fsdplab::app
