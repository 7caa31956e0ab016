// stream_demo.hpp — the first runnable job: two streams on each of W ranks, a collective-shaped wait
// between the ranks, SYNC against ASYNC.
//
// A stack of square linear layers whose weights are sharded over the ranks, each rank a thread with
// its own sim device (or a process: --comm mpi, rank_launch.hpp). Each layer's weight is all-gathered and then
// multiplied into the activations. The all-gather is a collective: on every rank it starts when the
// slowest rank is ready, which is the wait this demo is about. In SYNC mode the gather runs on the compute stream,
// so communication blocks compute; in ASYNC mode it runs on the all-gather stream one layer ahead
// (prefetch), ordered with events only, so it hides behind the previous layer's matmul. Step 0 runs
// SYNC and step 1 ASYNC on the same devices, so one trace shows both side by side.
#pragma once
#include <string>
#include <vector>

#include "engine/fsdp/sharding.hpp"
#include "engine/runtime/dtype.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/trace/trace_event.hpp"

namespace fsdplab {

struct StreamDemoConfig {
  int world = 2;
  int layers = 4;
  std::int64_t width = 1024;   // each layer is width x width
  std::int64_t tokens = 1024;  // rows of the activations
  DType dtype = DType::f32;
  std::vector<OverlapMode> modes = {OverlapMode::sync, OverlapMode::async};  // one step each, in this order
  std::string comm = "local";  // local: ranks as threads; mpi: one per process of an MPI launcher
};

struct StreamDemoStep {
  OverlapMode mode;
  SimTime begin = 0;  // when the step started (all ranks synchronised)
  SimTime end = 0;    // when the last rank's last op ended
  std::vector<double> output_sum;  // per rank: the sum of the last layer's output (a numerics check)
};

// Runs the demo on sim devices made from `device` and `link`, sending every trace event and memory
// counter of rank r to sinks[r] (sinks may be empty). Returns the steps' times. The devices are
// synchronised between steps, so the steps' intervals do not overlap. With ranks as processes, only the
// process of rank 0 gets the steps (the others get none) and only the hosted rank's sink is written.
std::vector<StreamDemoStep> run_stream_demo(const StreamDemoConfig& config, const DevicePreset& device,
                                            const LinkPreset& link, const std::vector<TraceSink*>& sinks);

}  // namespace fsdplab
