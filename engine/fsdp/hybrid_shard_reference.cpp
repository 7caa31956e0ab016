// The reference hybrid shard (task 8): shard groups of consecutive ranks, replica groups across them, and
// the all-reduce that turns a group's mean into the world's.
#include "engine/fsdp/hybrid_shard_task.hpp"

namespace fsdplab {
namespace {

class ReferenceHybridShard final : public HybridShardTask {
 public:
  // W = 8, S = 4:  shard groups {0 1 2 3} {4 5 6 7}   replica groups {0 4} {1 5} {2 6} {3 7}
  int shard_group_color(int rank, int shard_size) const override { return rank / shard_size; }
  int replica_group_color(int rank, int shard_size) const override { return rank % shard_size; }

  void all_reduce_replicas(Device& device, Communicator& replica_group, const Tensor& grad_shard) const override {
    // The mean of W / S means over S ranks each is the mean over all W ranks. On the reduce-scatter stream,
    // behind the reduce-scatter that wrote `grad_shard`, so stream order is all the ordering it needs.
    replica_group.all_reduce(device.stream(Lane::reduce_scatter), grad_shard, ReduceOp::avg);
  }
};

}  // namespace

const HybridShardTask& reference_hybrid_shard() {
  static const ReferenceHybridShard task;
  return task;
}

}  // namespace fsdplab
