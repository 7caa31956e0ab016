// labs/08-hybrid-shard/student.cpp — task 8: your HybridShardTask (engine/fsdp/hybrid_shard_task.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 8=student
#include "engine/fsdp/hybrid_shard_task.hpp"
#include "engine/fsdp/lab_todo.hpp"

namespace fsdplab {
namespace {

class StudentHybridShard final : public HybridShardTask {
 public:
  int shard_group_color(int rank, int shard_size) const override {
    // TODO(task 8)
    todo(8, "HybridShardTask::shard_group_color");
  }

  int replica_group_color(int rank, int shard_size) const override {
    // TODO(task 8)
    todo(8, "HybridShardTask::replica_group_color");
  }

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
