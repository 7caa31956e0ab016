// sharded_optimizer.hpp — task 5 of the lab: the optimizer on this rank's shards only.
//
// SGD and AdamW update each unit's f32 master shard from its f32 gradient shard. Their state (momentum,
// Adam's m and v) is allocated beside whatever they are given, so an optimizer given only shards holds
// only 1/W of the state: sharding the optimizer is choosing what to give it. In the ZeRO forms (zero1,
// zero2) the parameters stay whole on every rank (`replica`) and `master` is this rank's chunk of them:
// after the update each unit's chunks are all-gathered so every rank holds the whole updated parameters
// again. CPU offload (task 9) moves the step to the host; the lifecycle picks the stream. Gradient-norm clipping
// (--clip-grad-norm) needs the whole model's norm, which no rank holds: see [Note: clipping a sharded gradient].
// Exercise: labs/05-sharded-optimizer.
#pragma once
#include <memory>
#include <span>
#include <string>

#include "engine/comm/communicator.hpp"
#include "engine/fsdp/fsdp_task.hpp"
#include "engine/optim/optimizer.hpp"

namespace fsdplab {

// One unit's tensors as the optimizer sees them.
struct UnitShards {
  std::string name;  // the unit's, for messages and checkpoints
  Tensor master;     // f32 [shard]: this rank's chunk of the unit's parameters
  Tensor grad_shard; // f32 [shard]: this rank's chunk of the averaged gradient
  Tensor replica;    // ZeRO forms: f32 [padded], the whole parameters, `master` a view of chunk r; else undefined
};

class ShardedOptimizerTask : public FsdpTask {
 public:
  // The implementing class's file and line, for step-through (fsdp_task.hpp).
  explicit ShardedOptimizerTask(std::source_location origin = std::source_location::current()) : FsdpTask(origin) {}

  // An optimizer (make_optimizer, optim/optimizer.hpp) that updates every unit's master from its
  // gradient shard, one target per unit in the order given, named as the unit.
  virtual std::unique_ptr<Optimizer> make(std::span<const UnitShards> units, const OptimizerSpec& spec) const = 0;
  // One update of every target on `stream`.
  virtual void step(Optimizer& optimizer, Stream stream) const = 0;
  // ZeRO, after step(): each rank updated only its chunk of each unit's whole parameters. Gathers every
  // unit's master into its replica over `group` on the all-gather stream, starting after the compute
  // stream's update, and makes the compute stream wait for the gathers before the next forward reads them.
  virtual void all_gather_updates(Device& device, Communicator& group, std::span<const UnitShards> units) const = 0;
  // Gradient-norm clipping (torch.nn.utils.clip_grad_norm_ on the sharded model), called before step() when the run
  // clips, on the stream step() will get, once every unit's gradient is reduced. Writes the squared 2-norm of the
  // whole model's gradient into `squared_norm` (1-element f32 in that stream's memory; every rank of `group` the
  // same value), then scales every unit's grad_shard by min(max_norm / (norm + 1e-6), 1) (clip_grad_with_norm,
  // tensor/optimizer_ops.hpp). `group` is the shard group: its ranks' shards together hold each gradient element
  // once. Under CPU offload the stream is the host lane, where no collective runs: the sum goes through the device.
  virtual void clip_grad_norm(Communicator& group, std::span<const UnitShards> units, double max_norm,
                              const Tensor& squared_norm, Stream stream) const = 0;
};

// The reference implementation (sharded_optimizer_reference.cpp).
const ShardedOptimizerTask& reference_sharded_optimizer();

}  // namespace fsdplab
