// fsdp_event_log.hpp — the FSDP events a source's ranks reported (pre/post forward and backward of a
// unit, collectives issued and done, optimizer steps), kept for the step-through panel's history and
// the FlatParameter map's live unit states.
//
// A live run reports tens of events per unit per step, forever: the log keeps the latest
// kHistory of each source, and folds every event into the per-(rank, unit) state as it arrives, so
// nothing the map shows depends on the history's length.
#pragma once
#include <cstddef>
#include <deque>
#include <vector>

#include "engine/fsdp/fsdp_observer.hpp"

namespace fsdplab::app {

class FsdpEventLog {
 public:
  static constexpr std::size_t kHistory = 4096;

  void add_source();  // sources are numbered as in the TraceStore
  void add(int source, const FsdpEvent& event);
  void clear() { *this = FsdpEventLog(); }

  // The latest events of a source, oldest first: by each rank's host time (FsdpEvent::host_time), ranks in order
  // where it is the same. The ranks' threads report in whichever order they get there; this order is the same in
  // every run of the sim device, so a paused run's list is (a screenshot's byte for byte).
  const std::deque<FsdpEvent>& history(int source) const {
    return sources_.at(static_cast<std::size_t>(source)).history;
  }
  std::size_t total(int source) const { return sources_.at(static_cast<std::size_t>(source)).total; }
  // The unit's state on the rank after the latest event that named it; sharded before any.
  UnitState unit_state(int source, int rank, int unit) const;
  // What the rank's latest event was (the step-through panel's "latest event of the focus rank"); null if none.
  const FsdpEvent* latest(int source, int rank) const;

 private:
  struct Source {
    std::deque<FsdpEvent> history;
    std::size_t total = 0;
    std::vector<std::vector<UnitState>> states;  // [rank][unit]
    std::vector<FsdpEvent> latest;               // by rank; rank -1 where none came yet
  };
  std::vector<Source> sources_;
};

}  // namespace fsdplab::app
