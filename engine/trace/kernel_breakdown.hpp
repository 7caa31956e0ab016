// kernel_breakdown.hpp — where a rank's GPU time goes: its device work over some training steps, grouped
// by a key (the kernel's name, the phase, the kind of work), each group's calls and time per step and its
// share of the whole, largest first. `fsdplab bench --what kernels` prints it, from CUPTI's kernel, copy and
// memset records on the cuda device and from the ops' virtual durations on the sim device.
//
// The GPU time of a step is the SUM of its device work's durations, not the union: two kernels on different
// streams that run at once both count, so the shares add up to 100 % and the GPU time may exceed the step.
// Host events (the host lane) take no device time and are left out. `bench --what train` compares two breakdowns of
// the same training under SYNC and ASYNC (kernel_changes): where running communication beside compute slows it.
#pragma once
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/trace/trace_event.hpp"

namespace fsdplab {

struct KernelGroup {
  std::string key;
  double calls_per_step = 0;
  double ms_per_step = 0;
  double share = 0;  // of the GPU time, in [0, 1]; 0 when there was no device work
};

struct KernelBreakdown {
  std::vector<KernelGroup> groups;  // by ms_per_step, largest first; equal times by key
  double gpu_ms_per_step = 0;       // the sum of every group's ms_per_step
};

// `rank`'s device work in steps [first_step, first_step + steps), grouped by key(event), divided by `steps`.
// An Error when steps < 1.
KernelBreakdown kernel_breakdown(std::span<const TraceEvent> events, int rank, int first_step, int steps,
                                 const std::function<std::string(const TraceEvent&)>& key);

// The key that groups a trace of ops (the sim device's, or the cuda device's CUDA-event spans) as a GPU's kernels
// group: an op by its name, a collective by its kind ("all_gather"), since a collective op is named after its
// buffer ("all_gather transformer.h.0.flat_param_full") where a GPU's collective kernel is one kernel whatever it
// moves.
std::string op_group(const TraceEvent& e);

// One group of the same work under two schedules (bench --what train: SYNC, then ASYNC).
struct KernelChange {
  std::string key;
  double before_calls = 0, before_ms = 0;  // calls and ms a step under the first schedule; 0 where it had none
  double after_calls = 0, after_ms = 0;    // under the second
  double change_ms() const { return after_ms - before_ms; }
};

// Every key of either breakdown with its time in both, the largest change (up or down) first; equal changes by key.
std::vector<KernelChange> kernel_changes(const KernelBreakdown& before, const KernelBreakdown& after);

}  // namespace fsdplab
