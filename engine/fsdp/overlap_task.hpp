// overlap_task.hpp — task 6 of the lab: when each collective runs against the compute stream, and
// what memory that holds. The unit lifecycle (unit_lifecycle.hpp) asks it for the buffers a gather or a
// gradient needs, hands them back to it, and asks it at each point of a unit's pass which unit to gather
// ahead; it decides:
//
//   SYNC   every gather waits for all compute issued before it and the compute stream waits for every
//          collective at once, so nothing overlaps; buffers are freed at the host's time (safe: every
//          later user is ordered after compute)
//   ASYNC  streams are ordered by events only: a gather waits for nothing but the memory it writes
//          (and, once per forward pass, for the optimizer step that wrote the shards), compute waits
//          for a unit's gather when it needs the unit (and the engine's optimizer step for a unit's
//          reduction before that unit's update). Freed buffers are parked until their last user is done
//          (DeferredFrees).
//          The rate limiter holds the host before a gather while `max_inflight` gathered units hold
//          memory (PyTorch's limit_all_gathers). Prefetch issues the next unit's gather early:
//          forward (next in the order recorded in the first forward), backward in pre-backward or in
//          post-backward (next in the reverse of the post-forward order, the backward order where a model's
//          backward mirrors its forward).
//   pool   YaFSDP's two buffers: the units freed after forward take turns in two buffers allocated once
//          (the lifecycle sets unit.pool_slot before each gather: [Note: one unit at a time in a pool slot],
//          unit_lifecycle.cpp);
//          each has a free event (its last user is done) the next gather into it waits for on the
//          all-gather stream — never the host — and the unit's gathered event.
// Exercise: labs/06-prefetch-overlap.
#pragma once
#include "engine/fsdp/fsdp_task.hpp"
#include "engine/fsdp/fsdp_unit.hpp"

namespace fsdplab {

enum class PassPoint { pre_forward, post_forward, pre_backward, post_backward };

class OverlapTask : public FsdpTask {
 public:
  // The implementing class's file and line, for step-through (fsdp_task.hpp).
  explicit OverlapTask(std::source_location origin = std::source_location::current()) : FsdpTask(origin) {}

  // ---- memory ---------------------------------------------------------------------------------
  // Before a gather writes `unit.full`: makes it allocated and safe to write from the all-gather
  // stream (under SYNC that means ordered after all compute issued so far: the memory it is handed may
  // have been read by compute a moment ago). For a prefetch it may decline (the rate limiter is full):
  // false, and nothing was done.
  virtual bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const = 0;
  // After the last use of `unit.full` (compute's, or the gather's for a prefetch never used).
  virtual void release_full(FsdpUnit& unit, FsdpRank& rank) const = 0;
  // Before the compute stream zero-fills `unit.grad_full` in pre-backward.
  virtual void acquire_grad(FsdpUnit& unit, FsdpRank& rank) const = 0;
  // After the reduction of `unit.grad_full` was issued and `unit.reduced` recorded: the reduced
  // shard must be ready before the optimizer reads it, the full gradient freed after the reduction.
  virtual void release_grad(FsdpUnit& unit, FsdpRank& rank) const = 0;
  // A collective's temporary (a bf16 copy of the shard, an f32 copy of the gradient), last used by
  // work before `done`.
  virtual void release_staging(Tensor staging, const Event& done, FsdpRank& rank) const = 0;

  // ---- schedule -------------------------------------------------------------------------------
  // Called at each point of a unit's pass after the lifecycle's own work there (post_backward: after the
  // unit's parameters were resharded, before its reduction is issued, so a prefetch goes first on the
  // link). Returns the unit whose gather to issue now, ahead of its use, or nullptr; the lifecycle issues
  // it (acquire_full with prefetch = true first) unless the unit is gathering or gathered already.
  virtual FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const = 0;
  // Before the first unit's forward of a pass, and after the last unit's post-backward.
  virtual void begin_forward(FsdpRank& rank) const = 0;
  virtual void end_backward(FsdpRank& rank) const = 0;
};

// The reference implementation (overlap_reference.cpp).
const OverlapTask& reference_overlap();

}  // namespace fsdplab
