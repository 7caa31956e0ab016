// backward_task.hpp — task 4 of the lab: gradients of a unit, reduced into its shard.
//
//   pre_backward   gather the unit again if it was resharded after forward; allocate its full
//                  gradient, zeroed (backward ops add into gradients), and point the gradient views at it
//                  — unless it holds earlier micro-batches' gradients (accumulation), which it adds to
//   post_backward  reduce-scatter the full gradient into the f32 gradient shard, averaged over all W
//                  ranks (across shard groups too, for hybrid), then free the full parameter and
//                  gradient buffers; while rank.reduce_gradients is false, keep the full gradient instead
#pragma once
#include "engine/fsdp/fsdp_unit.hpp"

namespace fsdplab {

class BackwardTask {
 public:
  virtual ~BackwardTask() = default;
  virtual void pre_backward(FsdpUnit& unit, FsdpRank& rank) const = 0;
  // Afterwards `unit.grad_shard` holds the averaged gradient once the compute stream reaches work
  // issued after this call.
  virtual void post_backward(FsdpUnit& unit, FsdpRank& rank) const = 0;
};

}  // namespace fsdplab
