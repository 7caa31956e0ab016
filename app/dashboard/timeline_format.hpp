// timeline_format.hpp — how the timeline writes numbers: durations and instants of a trace's time (virtual on sim), op
// counts, and the time axis's tick spacing and labels (byte counts are the project's one format_bytes, byte_text.hpp).
//
// Durations pick their unit (ns, µs, ms, s) from their size; the axis picks one unit for all its labels
// from the tick step, with just enough decimals that neighbouring ticks read differently.
#pragma once
#include <cstdint>
#include <string>

#include "engine/runtime/sim_time.hpp"

namespace fsdplab::app {

// "850 ns", "12.34 µs", "1.235 ms", "2.500 s".
std::string format_duration(SimTime ns);
// An instant with nanosecond precision in a readable unit: "850 ns", "12.345 µs", "1.234567 ms", "2.000000123 s".
std::string format_instant(SimTime ns);
// Thousands separated: "1,234,567".
std::string format_count(std::uint64_t n);

// Milliseconds as the panels that count in them write them: in ms, or in s from 10 s up (a dry run of a large model
// on a slow link), where "384473.857 ms" would not fit an axis or a line and "384.474 s" does.
struct TimeUnit {
  const char* name = "ms";
  double ms = 1;                                                    // milliseconds in one unit
  std::string number(double milliseconds, int decimals = 3) const;  // "384.474"
  std::string text(double milliseconds, int decimals = 3) const;    // "384.474 s"
};
// The unit for times up to `largest_ms`.
TimeUnit time_unit_for(double largest_ms);

// The axis's tick step for `ns_per_pixel` and about `target_pixels` between ticks: 1, 2 or 5 × 10^k ns.
double tick_step(double ns_per_pixel, double target_pixels = 100);
// A tick's label in the unit that suits `magnitude` (the largest time on the axis) with the decimals
// `step` needs: "1.2 ms", "250 µs", "5.00002 s".
std::string format_tick(double t, double step, double magnitude);

}  // namespace fsdplab::app
