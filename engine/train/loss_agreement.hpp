// loss_agreement.hpp — when two trainings' losses are the same loss. A correct FSDP task changes at most the
// order of a sum, so a loss agrees within a relative tolerance; the grader's trainings and the dashboard's
// loss line beside the reference compare with this one rule.
#pragma once
#include <algorithm>
#include <cmath>

namespace fsdplab {

// The tolerance a correct task's losses keep (relative; absolute below 1).
inline constexpr double kLossTolerance = 1e-5;

// Whether `got` is `want` within `tolerance`, relative to |want| and absolute below 1. A NaN never agrees.
inline bool agrees(double got, double want, double tolerance = kLossTolerance) {
  return std::abs(got - want) <= tolerance * std::max(1.0, std::abs(want));
}

}  // namespace fsdplab
