// bench_ui.hpp — `fsdplab bench --what ui`: how long the dashboard's timeline takes to build a frame
// (CPU, headless ImGui) over synthetic traces of 10k, 100k and 1M events, all in view and zoomed to 1 %, then
// the whole dashboard (every panel) over the same traces.
#pragma once
#include <cstddef>
#include <vector>

#include "app/dashboard/trace_store.hpp"

namespace fsdplab::app {

struct UiBenchOptions {
  std::vector<std::size_t> events = {10'000, 100'000, 1'000'000};
  int warmup = 5;    // frames before timing
  int frames = 30;   // timed frames per row
  float width = 1600, height = 1000;
};

// A trace shaped like the sim device's, `events` events in all: sources SYNC and ASYNC × ranks 0 and 1;
// per step, per FSDP unit, an all-gather, then many short compute kernels (forward, then backward twice as
// many), a reduce-scatter after each unit's backward, host markers and a CPU optimizer step per unit. SYNC
// waits for each collective; ASYNC gathers ahead (two in flight) and reduces behind. Deterministic.
TraceStore synthetic_trace(std::size_t events);

void bench_ui(const UiBenchOptions& options = {});

}  // namespace fsdplab::app
