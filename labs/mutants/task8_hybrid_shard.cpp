// Task 8's mutants: the pitfalls of labs/08-hybrid-shard/README.md, each the reference
// (engine/fsdp/hybrid_shard_reference.cpp) with one defect. The methods a mutant gets right are the
// reference's, called through reference_hybrid_shard() (LikeTheReference).
#include "engine/fsdp/hybrid_shard_task.hpp"
#include "engine/tensor/elementwise.hpp"
#include "labs/mutants/mutants.hpp"

namespace fsdplab {
namespace {

const HybridShardTask& reference() { return reference_hybrid_shard(); }

// Forwards every call to the reference; a mutant overrides the one it gets wrong.
class LikeTheReference : public HybridShardTask {
 public:
  explicit LikeTheReference(std::source_location origin = std::source_location::current()) : HybridShardTask(origin) {}
  int shard_group_color(int rank, int shard_size) const override {
    return reference().shard_group_color(rank, shard_size);
  }
  int replica_group_color(int rank, int shard_size) const override {
    return reference().replica_group_color(rank, shard_size);
  }
  void all_reduce_replicas(Device& device, Communicator& replica_group, const Tensor& grad_shard) const override {
    reference().all_reduce_replicas(device, replica_group, grad_shard);
  }
};

// rank % S shards, rank / S replicates: trains exactly like the reference on the sim device (one link for
// every collective), but shards each unit across nodes and keeps the replicas inside one.
class SwappedColors final : public LikeTheReference {
 public:
  int shard_group_color(int rank, int shard_size) const override { return rank % shard_size; }
  int replica_group_color(int rank, int shard_size) const override { return rank / shard_size; }
};

// rank / S for the replica group too: the "replicas" are the shard group, whose ranks hold different chunks.
class SameColor final : public LikeTheReference {
 public:
  int replica_group_color(int rank, int shard_size) const override { return rank / shard_size; }
};

// rank % S for the shard group too: a unit is sharded across nodes, and the "replicas" hold different chunks.
class ShardLikeReplica final : public LikeTheReference {
 public:
  int shard_group_color(int rank, int shard_size) const override { return rank % shard_size; }
};

// ReduceOp::sum: the gradient comes out W / S times the mean.
class SumNotMean final : public LikeTheReference {
 public:
  void all_reduce_replicas(Device& device, Communicator& replica_group, const Tensor& grad_shard) const override {
    replica_group.all_reduce(device.stream(Lane::reduce_scatter), grad_shard, ReduceOp::sum);
  }
};

// Only the replica group's rank 0 issues the all-reduce (as if one rank per group did the group's work): its peers
// never join, and the collective waits for them.
class OneRankAllReduces final : public LikeTheReference {
 public:
  void all_reduce_replicas(Device& device, Communicator& replica_group, const Tensor& grad_shard) const override {
    if (replica_group.rank() == 0) reference().all_reduce_replicas(device, replica_group, grad_shard);
  }
};

// No all-reduce: each shard group trains on its own part of the batch, and the replicas drift apart.
class NoAllReduce final : public LikeTheReference {
 public:
  void all_reduce_replicas(Device&, Communicator&, const Tensor&) const override {}
};

// The all-reduce on the compute stream, which nothing orders after the reduce-scatter that wrote grad_shard.
class ComputeStream final : public LikeTheReference {
 public:
  void all_reduce_replicas(Device& device, Communicator& replica_group, const Tensor& grad_shard) const override {
    replica_group.all_reduce(device.stream(Lane::compute), grad_shard, ReduceOp::avg);
  }
};

// The compute stream made to wait for the all-reduce, "so the optimizer sees the mean": right numbers, but the
// backward of every unit after it waits for this unit's reduction, which no longer overlaps it.
class ComputeWaitsForAllReduce final : public LikeTheReference {
 public:
  void all_reduce_replicas(Device& device, Communicator& replica_group, const Tensor& grad_shard) const override {
    reference().all_reduce_replicas(device, replica_group, grad_shard);
    device.wait_stream(Lane::compute, Lane::reduce_scatter);
  }
};

// The compute stream made to wait for the reduce-scatter before the all-reduce: the same stall, from the other side.
class ComputeWaitsForReduceScatter final : public LikeTheReference {
 public:
  void all_reduce_replicas(Device& device, Communicator& replica_group, const Tensor& grad_shard) const override {
    device.wait_stream(Lane::compute, Lane::reduce_scatter);
    reference().all_reduce_replicas(device, replica_group, grad_shard);
  }
};

// The host made to wait for the compute stream after the all-reduce: right numbers, but the host stops issuing the
// backward at every unit until the device catches up.
class HostSyncOfCompute final : public LikeTheReference {
 public:
  void all_reduce_replicas(Device& device, Communicator& replica_group, const Tensor& grad_shard) const override {
    reference().all_reduce_replicas(device, replica_group, grad_shard);
    device.synchronize(Lane::compute);
  }
};

// The mean made by hand: the replicas' gradients summed, then scaled by 1 / replicas, where ReduceOp::avg divides in
// the collective (one elementwise pass more per unit on the reduce-scatter stream).
class SumThenScale final : public LikeTheReference {
 public:
  void all_reduce_replicas(Device& device, Communicator& replica_group, const Tensor& grad_shard) const override {
    const Stream stream = device.stream(Lane::reduce_scatter);
    replica_group.all_reduce(stream, grad_shard, ReduceOp::sum);
    scale(stream, grad_shard, 1.0f / static_cast<float>(replica_group.world()), grad_shard);
  }
};

// Each replica's gradient divided by the replica count first, then summed (a gradient pre-divide factor).
class PredivideThenSum final : public LikeTheReference {
 public:
  void all_reduce_replicas(Device& device, Communicator& replica_group, const Tensor& grad_shard) const override {
    const Stream stream = device.stream(Lane::reduce_scatter);
    scale(stream, grad_shard, 1.0f / static_cast<float>(replica_group.world()), grad_shard);
    replica_group.all_reduce(stream, grad_shard, ReduceOp::sum);
  }
};

}  // namespace

std::span<const Mutant> hybrid_shard_mutants() {
  static const Mutant mutants[] = {
      {8, "swapped-colors",
       "shard and replica colours swapped: rank % S shards a unit across nodes, rank / S replicates within one",
       instance<SwappedColors>},
      {8, "same-color", "the replica colour is rank / S, the shard group's: the all-reduce mixes different chunks",
       instance<SameColor>},
      {8, "shard-like-replica", "the shard colour is rank % S, the replica group's: a unit is sharded across nodes",
       instance<ShardLikeReplica>},
      {8, "sum-not-mean",
       "the all-reduce across replicas sums (ReduceOp::sum) instead of averaging: W / S times the gradient",
       instance<SumNotMean>},
      {8, "one-rank-all-reduces",
       "only the replica group's rank 0 issues the all-reduce: its peers never join the collective",
       instance<OneRankAllReduces>},
      {8, "no-all-reduce", "no all-reduce across the replicas: the gradient is the mean over S ranks, not over W",
       instance<NoAllReduce>},
      {8, "compute-stream", "the all-reduce is issued on the compute stream instead of the reduce-scatter stream",
       instance<ComputeStream>},
      {8, "compute-waits-for-all-reduce", "the compute stream is made to wait for the all-reduce across the replicas",
       instance<ComputeWaitsForAllReduce>},
      {8, "compute-waits-for-reduce-scatter",
       "the compute stream is made to wait for the reduce-scatter stream before the all-reduce",
       instance<ComputeWaitsForReduceScatter>},
      {8, "host-sync-of-compute", "the host synchronizes the compute stream after the all-reduce",
       instance<HostSyncOfCompute>},
      {8, "sum-then-scale", "sums the replicas' gradients, then scales by 1 / replicas, where ReduceOp::avg divides",
       instance<SumThenScale>},
      {8, "predivide-then-sum", "divides each gradient by the replica count, then sums, where ReduceOp::avg divides",
       instance<PredivideThenSum>},
  };
  return mutants;
}

}  // namespace fsdplab
