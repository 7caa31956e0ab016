// live_run.hpp — one FSDP training run behind the dashboard, on its own threads.
//
// The run's W rank threads push into queues the UI thread drains each frame: per rank an EventQueue
// (trace events and memory counters) and an FSDP event queue (pre/post forward and backward, the
// collectives, optimizer steps), and rank 0's step reports. Every queue is a single-producer,
// single-consumer list of chunks that never blocks the producer (event_queue.hpp): the engine never
// waits for the UI, and a slow frame only means more to drain next frame. The only thing that stops
// the ranks is the RunControl — the user's pause, break or stop.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "app/dashboard/fsdp_event_log.hpp"
#include "app/dashboard/trace_store.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/runtime/race_detector.hpp"
#include "engine/trace/event_queue.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/run_control.hpp"

namespace fsdplab::app {

class LiveRun {
 public:
  // Starts `fsdp` (its sinks, observers and control are set here) as source `source` of the store the
  // caller drains into. `control` is shared by every run of a session and must outlive this.
  LiveRun(FsdpRun fsdp, const PresetCatalog& presets, int source, RunControl& control);
  // Stops the ranks through the control if they still run, and joins them.
  ~LiveRun();
  LiveRun(const LiveRun&) = delete;
  LiveRun& operator=(const LiveRun&) = delete;

  // UI thread: moves everything the ranks published since the last call into `store` and `log`.
  // Returns how many items moved.
  std::size_t drain_into(TraceStore& store, FsdpEventLog& log);

  int source() const { return source_; }
  const FsdpRun& run() const { return fsdp_; }
  // Whether a step of this run is SYNC (A/B runs alternate).
  bool step_is_sync(int step) const;
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  // The error that ended the run early, if any (a stop asked for by the user is not one).
  std::optional<std::string> error() const;
  // The stream race that error is, where the sim device's race detector stopped the run.
  std::optional<RaceReport> race() const;

 private:
  class FsdpEventQueue;
  void body();

  FsdpRun fsdp_;
  const PresetCatalog& presets_;
  const int source_;
  RunControl& control_;
  std::vector<std::unique_ptr<EventQueue>> trace_queues_;
  std::vector<std::unique_ptr<FsdpEventQueue>> fsdp_queues_;
  SpscQueue<StepReport> steps_;
  std::vector<TraceEvent> event_scratch_;
  std::vector<CounterSample> counter_scratch_;
  std::atomic<bool> finished_{false};
  mutable std::mutex error_mutex_;
  std::optional<std::string> error_;
  std::optional<RaceReport> race_;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace fsdplab::app
