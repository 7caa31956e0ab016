// labs/03-forward/student.cpp — task 3: your ForwardTask (engine/fsdp/forward_task.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 3=student
#include "engine/fsdp/forward_task.hpp"
#include "engine/fsdp/lab_todo.hpp"

namespace fsdplab {
namespace {

class StudentForward final : public ForwardTask {
 public:
  void all_gather(Device& device, Communicator& group, const Tensor& shard, const Tensor& full,
                  Event& gathered) const override {
    // TODO(task 3)
    todo(3, "ForwardTask::all_gather");
  }

  void wait_for_unshard(Device& device, const Event& gathered) const override {
    // TODO(task 3)
    todo(3, "ForwardTask::wait_for_unshard");
  }

  bool reshard_after_forward(ShardingStrategy strategy, bool is_root) const override {
    // TODO(task 3)
    todo(3, "ForwardTask::reshard_after_forward");
  }
};

}  // namespace

const ForwardTask& student_forward() {
  static const StudentForward task;
  return task;
}

}  // namespace fsdplab
