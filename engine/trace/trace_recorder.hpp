// trace_recorder.hpp — a run's trace in memory, and the sink that fills it.
//
// The recorder is for code that reads the trace after the run (exports, tests, `bench`): it appends
// to plain vectors with no locking, so attach it only to devices driven by one thread. The dashboard,
// which reads while the run goes on, uses EventQueue instead.
#pragma once
#include <vector>

#include "engine/trace/trace_event.hpp"

namespace fsdplab {

// Events and counter samples, each in the order they were emitted (or read from a file).
struct TraceData {
  std::vector<TraceEvent> events;
  std::vector<CounterSample> counters;

  // Adds another rank's (or another run part's) trace after this one, e.g. to export all ranks.
  void append(const TraceData& other) {
    events.insert(events.end(), other.events.begin(), other.events.end());
    counters.insert(counters.end(), other.counters.begin(), other.counters.end());
  }
};

class TraceRecorder final : public TraceSink {
 public:
  void on_event(const TraceEvent& event) override { data_.events.push_back(event); }
  void on_counter(const CounterSample& sample) override { data_.counters.push_back(sample); }

  const TraceData& data() const { return data_; }
  void clear() { data_ = {}; }

 private:
  TraceData data_;
};

}  // namespace fsdplab
