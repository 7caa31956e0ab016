// labs/08-hybrid-shard/student.cpp — task 8: your HybridShardTask (engine/fsdp/hybrid_shard_task.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only — under --strategy hybrid,
// the only strategy that calls it:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 4 --strategy hybrid --hybrid-group 2 --impl 8=student
#include "engine/fsdp/hybrid_shard_task.hpp"
#include "engine/fsdp/lab_todo.hpp"

namespace fsdplab {
namespace {

class StudentHybridShard final : public HybridShardTask {
 public:
  // The colour Communicator::split gives world rank `rank` for its shard group, when a unit is sharded
  // over `shard_size` (S) CONSECUTIVE ranks: ranks sharding a unit together get the same colour (>= 0).
  // W = 8, S = 4: shard groups {0 1 2 3} {4 5 6 7}. Called once per rank before training under hybrid sharding
  // (1 < S < W); the grader also asks it at S = 1, where each rank is a group of its own.
  int shard_group_color(int rank, int shard_size) const override {
    // TODO(task 8)
    todo(8, "HybridShardTask::shard_group_color");
  }

  // The colour of the rank's replica group: the ranks (one per shard group) holding the same chunk of
  // every unit. W = 8, S = 4: {0 4} {1 5} {2 6} {3 7}. Called once per rank before training under hybrid
  // sharding (1 < S < W); the grader also asks it at S = 1 (one replica group, the world) and at S = W (each
  // rank alone, as under --strategy full).
  int replica_group_color(int rank, int shard_size) const override {
    // TODO(task 8)
    todo(8, "HybridShardTask::replica_group_color");
  }

  // Called right after the reduce-scatter inside the shard group was issued (only when the replica group
  // has more than one rank): `grad_shard` holds the mean over the S ranks of the shard group. Issue, on
  // the reduce-scatter stream (device.stream(Lane::reduce_scatter)), the collective on `replica_group`
  // that makes it the mean over all W ranks: Communicator::all_reduce(stream, tensor, ReduceOp::sum|avg).
  // No event and no host wait: the reduce-scatter that wrote `grad_shard` is earlier on the same stream.
  void all_reduce_replicas(Device& device, Communicator& replica_group, const Tensor& grad_shard) const override {
    // TODO(task 8)
    todo(8, "HybridShardTask::all_reduce_replicas");
  }
};

}  // namespace

const HybridShardTask& student_hybrid_shard() {
  static const StudentHybridShard task;
  return task;
}

}  // namespace fsdplab
