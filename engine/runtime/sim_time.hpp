// sim_time.hpp — the unit of every timestamp on a device clock.
//
// Integer nanoseconds: the same program must produce the same timeline twice, bit for bit, and
// integers keep comparisons and sums exact. The sim device's virtual clock and the CUDA device's
// measured clock share this unit, so the trace and the dashboard never care which one made a time.
#pragma once
#include <cmath>
#include <cstdint>

#include "engine/runtime/error.hpp"

namespace fsdplab {

using SimTime = std::int64_t;  // nanoseconds

constexpr SimTime kNsPerUs = 1'000;

// Rounds a duration in seconds up to whole nanoseconds; anything that takes time takes at least 1 ns,
// so an op always has a visible extent and ordering ties cannot hide a dependency.
// A duration that is not a number or past a million seconds (the int64 clock holds 292 years, and many ops
// add up) is an Error: converting it would wrap to a negative time and make the step shorter.
inline SimTime seconds_to_ns(double seconds) {
  if (seconds <= 0) return 0;
  check(seconds <= 1e6, "an op of ", seconds, " s on the virtual clock (at most 1e6 s); the device or link "
        "figures it was timed with are out of range (a rate near zero or a huge latency)");
  return static_cast<SimTime>(std::ceil(seconds * 1e9));
}
inline double ns_to_ms(SimTime ns) { return static_cast<double>(ns) / 1e6; }
inline double ns_to_us(SimTime ns) { return static_cast<double>(ns) / 1e3; }

}  // namespace fsdplab
