// labs/04-backward/student.cpp — task 4: your BackwardTask (engine/fsdp/backward_task.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 4=student
#include "engine/fsdp/backward_task.hpp"
#include "engine/fsdp/lab_todo.hpp"

namespace fsdplab {
namespace {

class StudentBackward final : public BackwardTask {
 public:
  void zero_gradient(Device& device, const Tensor& grad_full) const override {
    // TODO(task 4)
    todo(4, "BackwardTask::zero_gradient");
  }

  void reduce_scatter(Device& device, Communicator& group, const Tensor& grad_full,
                      const Tensor& grad_shard) const override {
    // TODO(task 4)
    todo(4, "BackwardTask::reduce_scatter");
  }
};

}  // namespace

const BackwardTask& student_backward() {
  static const StudentBackward task;
  return task;
}

}  // namespace fsdplab
