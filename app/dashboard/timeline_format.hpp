// timeline_format.hpp — how the timeline writes numbers: durations and instants of virtual time, op counts, and
// the time axis's tick spacing and labels (byte counts are the project's one format_bytes, byte_text.hpp).
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

// The axis's tick step for `ns_per_pixel` and about `target_pixels` between ticks: 1, 2 or 5 × 10^k ns.
double tick_step(double ns_per_pixel, double target_pixels = 100);
// A tick's label in the unit that suits `magnitude` (the largest time on the axis) with the decimals
// `step` needs: "1.2 ms", "250 µs", "5.00002 s".
std::string format_tick(double t, double step, double magnitude);

}  // namespace fsdplab::app
