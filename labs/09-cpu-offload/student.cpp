// labs/09-cpu-offload/student.cpp — task 9: your CpuOffloadTask (engine/fsdp/cpu_offload_task.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 9=student
// This task runs under --offload, e.g.
//   build/app/fsdplab run --model gpt2 --world 2 --offload --impl 9=student
#include "engine/fsdp/cpu_offload_task.hpp"
#include "engine/fsdp/lab_todo.hpp"
#include "engine/tensor/host_copy.hpp"  // copy_to_device, copy_to_host

namespace fsdplab {
namespace {

// Engine calls for this task (engine/runtime/device.hpp):
//   device.stream(Lane::memcpy)              the stream the copies run on (also Lane::all_gather, reduce_scatter)
//   device.record(event, lane)               `event` marks all work issued to `lane` so far
//   device.wait(lane, event)                 later work on `lane` waits for `event` (the host does not wait)
//   device.synchronize(event)                the HOST waits for `event`
// "Work on A after all work issued to B so far": Event e("..."); device.record(e, B); device.wait(A, e);
// device.wait_stream(A, B) does just that (torch's Stream.wait_stream).

class StudentCpuOffload final : public CpuOffloadTask {
 public:
  // Before a gather reads the shard: copy `host_shard` (pinned host memory) into `device_copy` (a fresh
  // device buffer) with copy_to_device on the memcpy stream. The copy must start after the all-gather
  // stream's earlier work (an earlier gather may still read the block `device_copy` now occupies), and the
  // all-gather stream must wait for the copy before the gather. Events only: no host wait.
  void copy_shard_to_device(Device& device, const Tensor& host_shard, const Tensor& device_copy) const override {
    // TODO(task 9)
    todo(9, "CpuOffloadTask::copy_shard_to_device");
  }

  // After the reduction into `device_grad` was issued on the reduce-scatter stream: copy it into
  // `host_grad` (the unit's gradient shard in host memory) with copy_to_host on the memcpy stream, once the
  // reduction is done. The engine records the unit's `reduced` event on the memcpy stream right after this.
  void copy_grad_to_host(Device& device, const Tensor& device_grad, const Tensor& host_grad) const override {
    // TODO(task 9)
    todo(9, "CpuOffloadTask::copy_grad_to_host");
  }

  // Before the CPU optimizer step reads a unit's host gradient shard: the host waits until the copy that
  // `landed` (the unit's `reduced` event) marks is done. Called once per unit; wait for this unit's copy only.
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
