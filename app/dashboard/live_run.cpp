#include "app/dashboard/live_run.hpp"

#include "engine/runtime/error.hpp"

namespace fsdplab::app {

class LiveRun::FsdpEventQueue final : public FsdpObserver {
 public:
  void on_fsdp_event(const FsdpEvent& event) override { queue_.push(event); }
  std::size_t drain(std::vector<FsdpEvent>& out) { return queue_.drain(out); }

 private:
  SpscQueue<FsdpEvent> queue_;
};

LiveRun::LiveRun(FsdpRun fsdp, const PresetCatalog& presets, int source, RunControl& control)
    : fsdp_(std::move(fsdp)), presets_(presets), source_(source), control_(control) {
  const auto world = static_cast<std::size_t>(fsdp_.run.world);
  fsdp_.sinks.clear();
  fsdp_.observers.clear();
  for (std::size_t r = 0; r < world; ++r) {
    trace_queues_.push_back(std::make_unique<EventQueue>());
    fsdp_queues_.push_back(std::make_unique<FsdpEventQueue>());
    fsdp_.sinks.push_back(trace_queues_.back().get());
    fsdp_.observers.push_back(fsdp_queues_.back().get());
  }
  fsdp_.control = &control_;
  fsdp_.control_source = source_;
  thread_ = std::thread([this] { body(); });
}

LiveRun::~LiveRun() {
  if (!finished()) control_.stop();
  thread_.join();
}

void LiveRun::body() {
  try {
    train_fsdp(fsdp_, presets_, [this](const StepReport& report) { steps_.push(report); });
  } catch (const RunStopped&) {
    // the user stopped it: not an error
  } catch (const std::exception& e) {
    const std::lock_guard lock(error_mutex_);
    error_ = e.what();
    if (const std::optional<RaceError> race = cause_of_type<RaceError>(e)) race_ = race->report();
  }
  finished_.store(true, std::memory_order_release);
}

std::optional<std::string> LiveRun::error() const {
  const std::lock_guard lock(error_mutex_);
  return error_;
}

std::optional<RaceReport> LiveRun::race() const {
  const std::lock_guard lock(error_mutex_);
  return race_;
}

bool LiveRun::step_is_sync(int step) const {
  return ab_mode(fsdp_.options.mode, fsdp_.ab_block, step) == OverlapMode::sync;
}

std::size_t LiveRun::drain_into(TraceStore& store, FsdpEventLog& log) {
  std::size_t moved = 0;
  // Steps drained before the trace, added after it: a step's report is pushed after its events, so every step
  // drained here has its events in the trace queues drained next (add_step reads them from the store).
  std::vector<StepReport> steps;
  steps_.drain(steps);
  for (const auto& queue : trace_queues_) {
    event_scratch_.clear();
    counter_scratch_.clear();
    moved += queue->drain(event_scratch_, counter_scratch_);
    for (const TraceEvent& e : event_scratch_) store.add_event(source_, e);
    for (const CounterSample& c : counter_scratch_) store.add_counter(source_, c);
  }
  store.remeasure_steps();
  std::vector<FsdpEvent> events;
  for (const auto& queue : fsdp_queues_) {
    events.clear();
    moved += queue->drain(events);
    for (const FsdpEvent& e : events) log.add(source_, e);
  }
  for (const StepReport& s : steps)
    store.add_step(source_, s.step, s.begin, s.end, s.loss, s.grad_norm, step_is_sync(s.step));
  return moved + steps.size();
}

}  // namespace fsdplab::app
