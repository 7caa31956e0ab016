#include "app/dashboard/fsdp_event_log.hpp"

#include <iterator>

#include "engine/runtime/error.hpp"

namespace fsdplab::app {

void FsdpEventLog::add_source() { sources_.emplace_back(); }

void FsdpEventLog::add(int source, const FsdpEvent& event) {
  check(source >= 0 && static_cast<std::size_t>(source) < sources_.size(), "FSDP event log: source ", source,
        " of ", sources_.size());
  check(event.rank >= 0, "FSDP event log: an event of rank ", event.rank, "; expected >= 0");
  Source& s = sources_[static_cast<std::size_t>(source)];
  // In the order the events happened, not the order the ranks' threads got here: see history().
  const auto happened_before = [](const FsdpEvent& a, const FsdpEvent& b) {
    return a.host_time != b.host_time ? a.host_time < b.host_time : a.rank < b.rank;
  };
  auto at = s.history.end();
  while (at != s.history.begin() && happened_before(event, *std::prev(at))) --at;
  s.history.insert(at, event);
  if (s.history.size() > kHistory) s.history.pop_front();
  ++s.total;
  const auto rank = static_cast<std::size_t>(event.rank);
  if (s.latest.size() <= rank) {
    FsdpEvent none;
    none.rank = -1;
    s.latest.resize(rank + 1, none);
    s.states.resize(rank + 1);
  }
  s.latest[rank] = event;
  if (event.unit >= 0) {
    std::vector<UnitState>& states = s.states[rank];
    if (states.size() <= static_cast<std::size_t>(event.unit)) states.resize(static_cast<std::size_t>(event.unit) + 1);
    states[static_cast<std::size_t>(event.unit)] = event.unit_state;
  }
}

UnitState FsdpEventLog::unit_state(int source, int rank, int unit) const {
  const Source& s = sources_.at(static_cast<std::size_t>(source));
  if (rank < 0 || static_cast<std::size_t>(rank) >= s.states.size()) return UnitState::sharded;
  const std::vector<UnitState>& states = s.states[static_cast<std::size_t>(rank)];
  if (unit < 0 || static_cast<std::size_t>(unit) >= states.size()) return UnitState::sharded;
  return states[static_cast<std::size_t>(unit)];
}

const FsdpEvent* FsdpEventLog::latest(int source, int rank) const {
  const Source& s = sources_.at(static_cast<std::size_t>(source));
  if (rank < 0 || static_cast<std::size_t>(rank) >= s.latest.size()) return nullptr;
  const FsdpEvent& e = s.latest[static_cast<std::size_t>(rank)];
  return e.rank < 0 ? nullptr : &e;
}

}  // namespace fsdplab::app
