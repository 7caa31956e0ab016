// fsdp_event_recorder.hpp — what the step-through tests share: an FSDP observer that keeps every event
// of its rank (read from other threads while the rank runs), and a run whose ranks each get one.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/fsdp/fsdp_observer.hpp"
#include "engine/train/fsdp_trainer.hpp"

namespace fsdplab::testing {

class FsdpEventRecorder final : public FsdpObserver {
 public:
  // Called on the rank's thread after the event was kept, before the run's control sees it.
  std::function<void(const FsdpEvent&)> after_event;

  void on_fsdp_event(const FsdpEvent& event) override {
    {
      const std::lock_guard lock(mutex_);
      events_.push_back(event);
    }
    if (after_event) after_event(event);
  }
  std::vector<FsdpEvent> events() const {
    const std::lock_guard lock(mutex_);
    return events_;
  }
  std::size_t count() const {
    const std::lock_guard lock(mutex_);
    return events_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<FsdpEvent> events_;
};

// A recorder per rank of `fsdp`, set as its observers.
inline std::vector<std::unique_ptr<FsdpEventRecorder>> record_events(FsdpRun& fsdp) {
  std::vector<std::unique_ptr<FsdpEventRecorder>> recorders;
  fsdp.observers.clear();
  for (int r = 0; r < fsdp.run.world; ++r) {
    recorders.push_back(std::make_unique<FsdpEventRecorder>());
    fsdp.observers.push_back(recorders.back().get());
  }
  return recorders;
}

// Polls `condition` every millisecond for at most `limit`; whether it came true.
inline bool eventually(const std::function<bool()>& condition,
                       std::chrono::milliseconds limit = std::chrono::milliseconds(3000)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace fsdplab::testing
