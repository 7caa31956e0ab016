// deferred_frees.hpp — memory the host is done with but a stream may still be using.
//
// Freeing a buffer at the host's time is only safe when every later user of the block is ordered
// after its last use. Under SYNC the compute stream waits for each collective, so it is. Under ASYNC
// the host runs ahead: a gathered unit is freed while the compute stream is still inside it, and the
// allocator must not hand the block to the next all-gather, which nothing orders after that compute.
// CUDA's caching allocator solves this with record_stream (the block is reused only once an event on
// the using stream has completed); this is the same, explicit: a buffer is parked with the event of
// its last use and given back when the host sees that event complete, or waits for it. Until then the
// memory ledger counts it as live — the memory price of running ahead.
#pragma once
#include <deque>

#include "engine/runtime/device.hpp"
#include "engine/runtime/event.hpp"

namespace fsdplab {

class DeferredFrees {
 public:
  // Keeps `memory` until `last_use` (recorded on the stream that used it last) has completed.
  // `limited`: it counts against a rate limit (FSDP's gathered units; see limited()).
  void push(Allocation memory, const Event& last_use, bool limited = false);
  // Gives back every parked buffer whose event the host can see completed (Device::completed: on the
  // sim device its time <= the host's, on the cuda device a cudaEventQuery), no waiting. The host's view joins the
  // event's, so later work on any stream is ordered after the last use.
  void release_completed(Device& device);
  // The host waits for the oldest limited buffer and gives it back (with every other one completed by
  // then). False when no limited buffer is parked.
  bool release_oldest_limited(Device& device);
  int limited() const;
  // The host waits for all of them.
  void release_all(Device& device);
  // `lane` was just made to wait for `waited`'s work so far: every buffer allocated for `lane` and last used
  // on `waited` or on `lane` is given back now, the host waiting for nothing. The allocator frees a block at
  // the current end of its own stream's work, which now comes after that use, so the block's next user
  // is ordered after it without the host knowing whether it is done.
  void release_behind(Lane lane, Lane waited);

 private:
  struct Parked {
    Allocation memory;
    Event last_use;
    bool limited;
  };
  void release(Device& device, Parked& parked);
  std::deque<Parked> parked_;
};

}  // namespace fsdplab
