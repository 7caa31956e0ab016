// hybrid_shard_task.hpp — bonus task 8 of the lab: HYBRID_SHARD, full sharding inside groups of S ranks
// (a node), replication across them.
//
// W ranks form W / S shard groups of S ranks each; a unit is sharded over a shard group, so the S ranks
// of a group hold one copy of the model between them. The ranks holding the same chunk in different
// groups form a replica group (W / S ranks). After the reduce-scatter inside the shard group (task 4)
// each chunk is the mean over S ranks only: an all-reduce across the replica group makes it the mean
// over all W. The fast link carries the big gathers, the slow one only 1/S of the gradient.
// Exercise: labs/08-hybrid-shard.
#pragma once
#include "engine/comm/communicator.hpp"
#include "engine/fsdp/fsdp_task.hpp"

namespace fsdplab {

class HybridShardTask : public FsdpTask {
 public:
  // The implementing class's file and line, for step-through (fsdp_task.hpp).
  explicit HybridShardTask(std::source_location origin = std::source_location::current()) : FsdpTask(origin) {}

  // Communicator::split's colour for rank `rank`'s shard group when units are sharded over `shard_size`
  // consecutive ranks: ranks that shard a unit together get the same colour.
  virtual int shard_group_color(int rank, int shard_size) const = 0;
  // The colour of its replica group: the ranks that hold the same chunk of every unit.
  virtual int replica_group_color(int rank, int shard_size) const = 0;
  // After the reduce-scatter inside the shard group: `grad_shard` holds the mean over the shard group;
  // issues, on the reduce-scatter stream, what makes it the mean over `replica_group` as well.
  virtual void all_reduce_replicas(Device& device, Communicator& replica_group, const Tensor& grad_shard) const = 0;
};

// The reference implementation (hybrid_shard_reference.cpp).
const HybridShardTask& reference_hybrid_shard();

}  // namespace fsdplab
