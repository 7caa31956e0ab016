// The reference CPU offload (task 9): copies on the memcpy stream ordered by events, and the host's one
// wait before the CPU optimizer step.
#include "engine/fsdp/cpu_offload_task.hpp"
#include "engine/tensor/host_copy.hpp"

namespace fsdplab {
namespace {

class ReferenceCpuOffload final : public CpuOffloadTask {
 public:
  void copy_shard_to_device(Device& device, const Tensor& host_shard, const Tensor& device_copy) const override {
    // The copy may take a block an earlier gather read on the all-gather stream.
    device.wait_stream(Lane::memcpy, Lane::all_gather);
    copy_to_device(device.stream(Lane::memcpy), host_shard, device_copy);
    device.wait_stream(Lane::all_gather, Lane::memcpy);
  }

  void copy_grad_to_host(Device& device, const Tensor& device_grad, const Tensor& host_grad) const override {
    device.wait_stream(Lane::memcpy, Lane::reduce_scatter);
    copy_to_host(device.stream(Lane::memcpy), device_grad, host_grad);
  }

  void wait_for_grad_on_host(Device& device, const Event& landed) const override {
    // The host's one wait for this unit: the CPU is about to read the shard the copy writes.
    device.synchronize(landed);
  }
};

}  // namespace

const CpuOffloadTask& reference_cpu_offload() {
  static const ReferenceCpuOffload task;
  return task;
}

}  // namespace fsdplab
