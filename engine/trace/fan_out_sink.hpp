// fan_out_sink.hpp — one rank's trace to several sinks at once (the recorder of --trace and the
// dashboard stream of --dashboard), where a run takes a single sink per rank (FsdpRun::sinks).
#pragma once
#include <utility>
#include <vector>

#include "engine/trace/trace_event.hpp"

namespace fsdplab {

class FanOutSink final : public TraceSink {
 public:
  explicit FanOutSink(std::vector<TraceSink*> sinks) : sinks_(std::move(sinks)) {}

  void on_event(const TraceEvent& event) override {
    for (TraceSink* sink : sinks_) sink->on_event(event);
  }
  void on_counter(const CounterSample& sample) override {
    for (TraceSink* sink : sinks_) sink->on_counter(sample);
  }

 private:
  std::vector<TraceSink*> sinks_;
};

}  // namespace fsdplab
