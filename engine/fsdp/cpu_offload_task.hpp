// cpu_offload_task.hpp — bonus task 9 of the lab: CPU offload (PyTorch's CPUOffload(offload_params=True)).
//
// The f32 master and gradient shards and the optimizer state live in pinned host memory. Each gather
// starts with a host-to-device copy of the shard, each reduction ends with a device-to-host copy of the
// gradient shard, both on the memcpy stream, so PCIe transfers show as their own lane and overlap
// collectives and compute like any other stream; events order them, never the host. The optimizer then
// steps on the CPU, once every gradient has landed. Exercise: labs/09-cpu-offload.
#pragma once
#include "engine/fsdp/fsdp_task.hpp"
#include "engine/runtime/event.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

class CpuOffloadTask : public FsdpTask {
 public:
  // The implementing class's file and line, for step-through (fsdp_task.hpp).
  explicit CpuOffloadTask(std::source_location origin = std::source_location::current()) : FsdpTask(origin) {}

  // Before a gather reads the shard: copies `host_shard` into `device_copy` on the memcpy stream, after
  // the all-gather stream's earlier work (it may have read that memory), and makes the all-gather stream
  // wait for the copy.
  virtual void copy_shard_to_device(Device& device, const Tensor& host_shard, const Tensor& device_copy) const = 0;
  // After the reduction into `device_grad` was issued on the reduce-scatter stream: copies it into
  // `host_grad` on the memcpy stream, once the reduction is done.
  virtual void copy_grad_to_host(Device& device, const Tensor& device_grad, const Tensor& host_grad) const = 0;
  // Before the CPU optimizer step reads a unit's host gradient shard: the host waits until the copy
  // recorded by `landed` is done.
  virtual void wait_for_grad_on_host(Device& device, const Event& landed) const = 0;
};

// The reference implementation (cpu_offload_reference.cpp).
const CpuOffloadTask& reference_cpu_offload();

}  // namespace fsdplab
