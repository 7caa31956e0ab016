// sharded_optimizer.hpp — task 5 of the lab: the optimizer on this rank's shards only.
//
// SGD and AdamW update each unit's f32 master shard from its gradient shard; their state (momentum,
// Adam's m and v) is allocated beside each shard, so it is sharded too: W ranks hold 1/W of it each.
// In the ZeRO forms (zero1, zero2) the parameters stay whole on every rank and `master` is this
// rank's chunk of them; after the update each unit's chunks are all-gathered so every rank holds
// the whole updated parameters again.
#pragma once
#include <memory>
#include <span>

#include "engine/fsdp/fsdp_unit.hpp"
#include "engine/optim/optimizer.hpp"

namespace fsdplab {

class ShardedOptimizerTask {
 public:
  virtual ~ShardedOptimizerTask() = default;
  // An optimizer over every unit's (master, grad_shard) pair, state on `rank`'s device.
  virtual std::unique_ptr<Optimizer> make(std::span<FsdpUnit* const> units, const OptimizerSpec& spec,
                                          FsdpRank& rank) const = 0;
  // One update on the compute stream, after every unit's post_backward; afterwards the next forward
  // can gather (or, replicated, use) the updated parameters.
  virtual void step(Optimizer& optimizer, std::span<FsdpUnit* const> units, FsdpRank& rank) const = 0;
};

}  // namespace fsdplab
