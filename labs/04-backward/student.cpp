// labs/04-backward/student.cpp — task 4: your BackwardTask (engine/fsdp/backward_task.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 4=student
#include "engine/fsdp/backward_task.hpp"
#include "engine/fsdp/lab_todo.hpp"

// fill(), which zero_gradient needs, is declared here:
#include "engine/tensor/elementwise.hpp"

namespace fsdplab {
namespace {

class StudentBackward final : public BackwardTask {
 public:
  // Called in the unit's pre-backward, after the engine gathered the parameters and allocated
  // `grad_full` (the unit's whole flat gradient, [padded_numel], padding included; its contents are
  // whatever the allocator's cached block held).
  // Contract: `grad_full` holds zeros once the compute stream reaches work issued after this call.
  //   The backward ops that follow on the compute stream ADD into it (dW += x^T dy).
  // Engine calls: device.stream(Lane::compute); fill(Stream, const Tensor&, float).
  void zero_gradient(Device& device, const Tensor& grad_full) const override {
    // TODO(task 4)
    todo(4, "BackwardTask::zero_gradient");
  }

  // Called in the unit's post-backward, right after its backward was issued on the compute stream.
  // Contract: issue, on the device's reduce-scatter stream, the reduce-scatter of `grad_full` over
  //   `group` into `grad_shard` (this rank's chunk), as the MEAN over the group's ranks. The compute
  //   stream wrote `grad_full` just before: the reduction must start after that work.
  //   Order the streams with an event (the host must not wait); issue the collective and return.
  //   Shapes: grad_full.numel() == group.world() * grad_shard.numel().
  // Engine calls: Event e("name"); device.record(e, Lane::...); device.wait(Lane::..., e);
  //   group.reduce_scatter(device.stream(Lane::...), full, shard, ReduceOp::sum or ReduceOp::avg).
  // Do not free anything: the engine (task 6) frees grad_full once the reduction is done.
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
