#include "engine/runtime/deferred_frees.hpp"

#include <algorithm>

namespace fsdplab {

void DeferredFrees::push(Allocation memory, const Event& last_use, bool limited) {
  parked_.push_back({std::move(memory), last_use, limited});
}

int DeferredFrees::limited() const {
  return static_cast<int>(std::count_if(parked_.begin(), parked_.end(), [](const Parked& p) { return p.limited; }));
}

void DeferredFrees::release(Device& device, Parked& parked) {
  // Orders the host after the last use (the race detector's view); moves no time when it had completed.
  device.synchronize(parked.last_use);
  parked.memory.reset();
}

void DeferredFrees::release_completed(Device& device) {
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (device.completed(it->last_use)) {
      release(device, *it);
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
}

bool DeferredFrees::release_oldest_limited(Device& device) {
  const auto oldest = std::find_if(parked_.begin(), parked_.end(), [](const Parked& p) { return p.limited; });
  if (oldest == parked_.end()) return false;
  device.synchronize(oldest->last_use);
  release(device, *oldest);
  parked_.erase(oldest);
  release_completed(device);
  return true;
}

void DeferredFrees::release_behind(Lane lane, Lane waited) {
  std::erase_if(parked_, [&](Parked& p) {
    const Lane used = p.last_use.lane();
    if (p.memory.block()->stream != lane || (used != waited && used != lane)) return false;
    p.memory.reset();
    return true;
  });
}

void DeferredFrees::release_all(Device& device) {
  for (Parked& p : parked_) release(device, p);
  parked_.clear();
}

}  // namespace fsdplab
