// trainer.hpp — the single-rank baseline training loop, the reference every FSDP run is judged by.
//
// Each step: the host waits for the device, writes the batch, zeroes the gradients, runs forward,
// backward and the optimizer on the compute stream, then waits again to read the loss (as
// `loss.item()` does). Ops are labelled with the step and phase for the trace.
#pragma once
#include <functional>
#include <vector>

#include "engine/runtime/presets.hpp"
#include "engine/trace/trace_event.hpp"
#include "engine/train/run_config.hpp"

namespace fsdplab {

struct StepReport {
  int step = 0;
  double loss = 0;
  SimTime begin = 0;  // device time (virtual on sim) when the step started
  SimTime end = 0;
};

// Trains `run` (world 1) on a sim device made from the presets. Calls on_step after each step, and
// sends every trace event and memory counter to `sink` (may be null). Writes --save-init and
// --save-final folders when asked. Returns the steps' reports.
std::vector<StepReport> train_baseline(const RunConfig& run, const PresetCatalog& presets,
                                       const std::function<void(const StepReport&)>& on_step, TraceSink* sink);

}  // namespace fsdplab
