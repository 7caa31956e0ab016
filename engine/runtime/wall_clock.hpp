// wall_clock.hpp — the host's wall clock, for what a tool reports about its own run (how long a bench, a report or
// a grading took). The lab's schedules never read it: they read the device's clock (sim_time.hpp).
#pragma once
#include <chrono>

namespace fsdplab {

// Seconds of wall-clock time since `start`, a std::chrono::steady_clock reading (steady: never set back).
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace fsdplab
