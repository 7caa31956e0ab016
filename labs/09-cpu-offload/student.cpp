// labs/09-cpu-offload/student.cpp — task 9: your CpuOffloadTask (engine/fsdp/cpu_offload_task.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 9=student
#include "engine/fsdp/cpu_offload_task.hpp"
#include "engine/fsdp/lab_todo.hpp"

namespace fsdplab {
namespace {

class StudentCpuOffload final : public CpuOffloadTask {
 public:
  void copy_shard_to_device(Device& device, const Tensor& host_shard, const Tensor& device_copy) const override {
    // TODO(task 9)
    todo(9, "CpuOffloadTask::copy_shard_to_device");
  }

  void copy_grad_to_host(Device& device, const Tensor& device_grad, const Tensor& host_grad) const override {
    // TODO(task 9)
    todo(9, "CpuOffloadTask::copy_grad_to_host");
  }

  void wait_for_grad_on_host(Device& device, const Event& landed) const override {
    // TODO(task 9)
    todo(9, "CpuOffloadTask::wait_for_grad_on_host");
  }
};

}  // namespace

const CpuOffloadTask& student_cpu_offload() {
  static const StudentCpuOffload task;
  return task;
}

}  // namespace fsdplab
