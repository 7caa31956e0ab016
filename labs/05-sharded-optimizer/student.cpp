// labs/05-sharded-optimizer/student.cpp — task 5: your ShardedOptimizerTask (engine/fsdp/sharded_optimizer.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 5=student
#include "engine/fsdp/sharded_optimizer.hpp"
#include "engine/fsdp/lab_todo.hpp"

namespace fsdplab {
namespace {

class StudentShardedOptimizer final : public ShardedOptimizerTask {
 public:
  std::unique_ptr<Optimizer> make(std::span<const UnitShards> units, const OptimizerSpec& spec) const override {
    // TODO(task 5)
    todo(5, "ShardedOptimizerTask::make");
  }

  void step(Optimizer& optimizer, Stream stream) const override {
    // TODO(task 5)
    todo(5, "ShardedOptimizerTask::step");
  }

  void all_gather_updates(Device& device, Communicator& group, std::span<const UnitShards> units) const override {
    // TODO(task 5)
    todo(5, "ShardedOptimizerTask::all_gather_updates");
  }
};

}  // namespace

const ShardedOptimizerTask& student_sharded_optimizer() {
  static const StudentShardedOptimizer task;
  return task;
}

}  // namespace fsdplab
