// dashboard_testing.hpp — what the dashboard tests share: small live settings, driving a Dashboard
// frame by frame in a headless ImGui context until something happens, and finding a FlatParameter map's cell.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "app/dashboard/dashboard.hpp"
#include "app/dashboard/headless_imgui.hpp"

namespace fsdplab::app {

// GPT-2 test-tiny on 2 ranks, unpaced: a few steps take well under a second.
inline SessionSettings tiny_settings(int steps) {
  SessionSettings s;
  s.preset = "test-tiny";
  s.steps = steps;
  s.steps_per_second = 0;
  return s;
}

// frames_until's default: a guard against a session that never gets there, not a time limit. A sanitizer's build
// runs sessions many times slower: under TSan, on two cores that ctest -j2 shares, a live session of test-small
// beside the reference took over 20 s.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr double kFramesUntilSeconds = 120;
#else
inline constexpr double kFramesUntilSeconds = 20;
#endif

// Builds frames until `done` holds (checked after each), or fails the test after `seconds` of wall time.
inline void frames_until(HeadlessImGui& imgui, Dashboard& dashboard, const std::function<bool()>& done,
                         double seconds = kFramesUntilSeconds) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    imgui.new_frame();
    dashboard.frame();
    imgui.render();
    if (done()) return;
    ASSERT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), seconds)
        << "the dashboard did not get there in time";
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// The map's cell of `unit` on `rank` as the last frame drew it; a failure (and a cell of unit -1) where there is none.
inline const FlatParameterPanel::Cell& map_cell(const FlatParameterPanel& panel, int unit, int rank) {
  for (const FlatParameterPanel::Cell& c : panel.cells())
    if (c.unit == unit && c.rank == rank) return c;
  ADD_FAILURE() << "no cell of unit " << unit << ", rank " << rank << " in the FlatParameter map";
  static const FlatParameterPanel::Cell none{.unit = -1, .rank = -1};
  return none;
}

}  // namespace fsdplab::app
