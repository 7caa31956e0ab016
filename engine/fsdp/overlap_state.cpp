#include "engine/fsdp/overlap_state.hpp"

#include <algorithm>

#include "engine/fsdp/fsdp_unit.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {

bool rate_limited(const FsdpUnit& unit) { return unit.reshard_after_forward; }

int live_gathered(const OverlapState& s) {
  const auto in_use = std::count_if(s.units.begin(), s.units.end(), [](const FsdpUnit* u) {
    return rate_limited(*u) && u->state != UnitState::sharded && u->pool_slot < 0;
  });
  return static_cast<int>(in_use) + s.parked.limited();
}

FsdpUnit* next_in_forward(const OverlapState& s, const FsdpUnit& unit) {
  const auto it = std::find(s.forward_order.begin(), s.forward_order.end(), &unit);
  return it != s.forward_order.end() && it + 1 != s.forward_order.end() ? *(it + 1) : nullptr;
}

FsdpUnit* next_in_backward(const OverlapState& s, const FsdpUnit& unit) {
  const auto& order = s.post_forward_order;
  auto it = std::find(order.begin(), order.end(), &unit);
  while (it != order.begin()) {
    --it;
    if (std::find(s.backward_started.begin(), s.backward_started.end(), *it) == s.backward_started.end()) return *it;
  }
  return nullptr;
}

void check_prefetches_used(const OverlapState& s) {
  for (const FsdpUnit* unit : s.units)
    if (unit->state == UnitState::gathering)
      fail_as<UnusedPrefetch>("FSDP unit '", unit->name, "' was prefetched in this pass but never used: a prefetch ",
                              "must name a unit that runs later in the same pass");
}

void record_order(std::vector<FsdpUnit*>& order, std::size_t& seen, bool recorded, FsdpUnit& unit,
                  std::string_view point) {
  if (!recorded) {
    order.push_back(&unit);
  } else {
    check(seen < order.size() && order[seen] == &unit, "FSDP unit '", unit.name, "' ran its ", point, " at position ",
          seen, " of this forward, but the first forward had ",
          seen < order.size() ? "'" + order[seen]->name + "'" : std::string("no unit"),
          " there; prefetch replays the recorded order, so the model must run its units in the same order every step");
  }
  ++seen;
}

}  // namespace fsdplab
