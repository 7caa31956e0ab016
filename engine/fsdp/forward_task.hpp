// forward_task.hpp — task 3 of the lab: gather a unit before its forward, reshard it after.
//
//   pre_forward   all-gather the unit's shards into its full buffer (on the all-gather stream; the
//                 compute stream waits for it by an event) and point the parameter views at it
//   post_forward  free the full buffer when the unit reshards after forward (full_shard, hybrid);
//                 keep it for the backward otherwise (shard_grad_op, and the root unit always,
//                 whose parameters the backward needs first)
// unshard and reshard are the two halves; backward (task 4) calls them again. prefetch is unshard's
// first half alone: the gather is issued, the compute stream waits for it only when the unit runs.
// Which memory the gather writes, and when buffers are freed, is task 6's (overlap_task.hpp).
#pragma once
#include "engine/fsdp/fsdp_unit.hpp"

namespace fsdplab {

class ForwardTask {
 public:
  virtual ~ForwardTask() = default;
  // Makes `unit.full` hold the whole unit in options.param_dtype and points the views at it; nothing
  // when the unit is already unsharded. The compute stream may use the parameters afterwards.
  virtual void unshard(FsdpUnit& unit, FsdpRank& rank) const = 0;
  // Issues the gather of a sharded unit without making the compute stream wait (state `gathering`);
  // false when task 6's rate limiter declined it. Nothing for a unit already gathering or gathered.
  virtual bool prefetch(FsdpUnit& unit, FsdpRank& rank) const = 0;
  // Releases `unit.full` (unless it is the replica itself) through task 6; the views stay, pointing at
  // memory the unit no longer owns.
  virtual void reshard(FsdpUnit& unit, FsdpRank& rank) const = 0;
  virtual void pre_forward(FsdpUnit& unit, FsdpRank& rank) const = 0;
  virtual void post_forward(FsdpUnit& unit, FsdpRank& rank) const = 0;
};

}  // namespace fsdplab
