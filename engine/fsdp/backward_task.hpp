// backward_task.hpp — task 4 of the lab: a unit's gradient, reduced into this rank's shard.
//
// The unit lifecycle (unit_lifecycle.hpp) gathers the unit again before its backward when the forward
// freed it (with task 3's all_gather), and calls this task for the gradient:
//   pre-backward    zero_gradient: the unit's full gradient buffer starts at zero (backward ops add)
//   post-backward   reduce_scatter: the full gradient, averaged over the group, into this rank's shard
// Everything else a real FSDP does there is a layer the lifecycle adds: bf16 gradients widened to f32
// before the sum (mixed precision), the all-reduce across replica groups (task 8, hybrid), the copy to the
// host (task 9, offload), accumulating micro-batches without reducing (no_sync), and the whole-gradient
// all-reduce of the replicated strategies. Exercise: labs/04-backward.
#pragma once
#include "engine/comm/communicator.hpp"
#include "engine/fsdp/fsdp_task.hpp"

namespace fsdplab {

class BackwardTask : public FsdpTask {
 public:
  // The implementing class's file and line, for step-through (fsdp_task.hpp).
  explicit BackwardTask(std::source_location origin = std::source_location::current()) : FsdpTask(origin) {}

  // Before the unit's backward: `grad_full` (the unit's whole flat gradient) holds zeros once the compute
  // stream reaches work issued after this call.
  virtual void zero_gradient(Device& device, const Tensor& grad_full) const = 0;
  // After the unit's backward: issues, on the device's reduce-scatter stream, the reduce-scatter of
  // `grad_full` over `group` into `grad_shard` (this rank's chunk), as the mean over the group's ranks.
  // The compute stream wrote `grad_full` just before: the reduction must start after that work.
  virtual void reduce_scatter(Device& device, Communicator& group, const Tensor& grad_full,
                              const Tensor& grad_shard) const = 0;
};

// [Note: sum or mean]
// The loss each rank differentiates is the mean over its B/W rows. Summing the W gradients gives W times
// the gradient of the global mean, and the optimizer then takes steps W times too long (AdamW hides it
// mostly, SGD does not). Dividing twice (once here, once in the loss) makes them W times too short.
// ReduceOp::avg sums in rank order and divides by the group's size once.

// The reference implementation (backward_reference.cpp).
const BackwardTask& reference_backward();

}  // namespace fsdplab
