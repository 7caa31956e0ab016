// Task 9's mutants: the pitfalls of labs/09-cpu-offload/README.md, each the reference
// (engine/fsdp/cpu_offload_reference.cpp) with one defect. The methods a mutant gets right are the
// reference's, called through reference_cpu_offload() (LikeTheReference).
#include "engine/fsdp/cpu_offload_task.hpp"
#include "engine/tensor/host_copy.hpp"
#include "labs/mutants/mutants.hpp"

namespace fsdplab {
namespace {

const CpuOffloadTask& reference() { return reference_cpu_offload(); }

// Forwards every call to the reference; a mutant overrides the one it gets wrong.
class LikeTheReference : public CpuOffloadTask {
 public:
  explicit LikeTheReference(std::source_location origin = std::source_location::current()) : CpuOffloadTask(origin) {}
  void copy_shard_to_device(Device& device, const Tensor& host_shard, const Tensor& device_copy) const override {
    reference().copy_shard_to_device(device, host_shard, device_copy);
  }
  void copy_grad_to_host(Device& device, const Tensor& device_grad, const Tensor& host_grad) const override {
    reference().copy_grad_to_host(device, device_grad, host_grad);
  }
  void wait_for_grad_on_host(Device& device, const Event& landed) const override {
    reference().wait_for_grad_on_host(device, landed);
  }
};

// The host waits for each copy up: right numbers, but the host stops running ahead at every gather.
class H2dHostSync final : public LikeTheReference {
 public:
  void copy_shard_to_device(Device& device, const Tensor& host_shard, const Tensor& device_copy) const override {
    device.wait_stream(Lane::memcpy, Lane::all_gather);
    copy_to_device(device.stream(Lane::memcpy), host_shard, device_copy);
    device.synchronize(Lane::memcpy);
  }
};

// The copy up on the all-gather stream: ordered by stream order, but the memcpy lane stays empty and each
// copy queues behind the previous gather.
class H2dOnAllGather final : public LikeTheReference {
 public:
  void copy_shard_to_device(Device& device, const Tensor& host_shard, const Tensor& device_copy) const override {
    copy_to_device(device.stream(Lane::all_gather), host_shard, device_copy);
  }
};

// The all-gather stream never told to wait for the copy up: the gather may read the shard half copied.
class GatherNoWait final : public LikeTheReference {
 public:
  void copy_shard_to_device(Device& device, const Tensor& host_shard, const Tensor& device_copy) const override {
    device.wait_stream(Lane::memcpy, Lane::all_gather);
    copy_to_device(device.stream(Lane::memcpy), host_shard, device_copy);
  }
};

// The copy up not ordered after the earlier gathers: it may overwrite a block a gather still reads.
class CopyBeforeGathersDone final : public LikeTheReference {
 public:
  void copy_shard_to_device(Device& device, const Tensor& host_shard, const Tensor& device_copy) const override {
    copy_to_device(device.stream(Lane::memcpy), host_shard, device_copy);
    device.wait_stream(Lane::all_gather, Lane::memcpy);
  }
};

// The compute stream made to wait for the copy up too, "to be safe": right numbers, but the unit computing now waits
// for the next unit's copy, so the copies no longer hide under compute.
class ComputeWaitsForCopyUp final : public LikeTheReference {
 public:
  void copy_shard_to_device(Device& device, const Tensor& host_shard, const Tensor& device_copy) const override {
    reference().copy_shard_to_device(device, host_shard, device_copy);
    device.wait_stream(Lane::compute, Lane::memcpy);
  }
};

// The copy back issued without waiting for the reduction: it reads the gradient shard half reduced.
class CopyBackBeforeReduction final : public LikeTheReference {
 public:
  void copy_grad_to_host(Device& device, const Tensor& device_grad, const Tensor& host_grad) const override {
    copy_to_host(device.stream(Lane::memcpy), device_grad, host_grad);
  }
};

// The copy back on the reduce-scatter stream: ordered after the reduction by stream order, but the engine
// records `landed` on the memcpy stream, which now holds no copy, so the event covers neither.
class CopyBackOnReduceScatter final : public LikeTheReference {
 public:
  void copy_grad_to_host(Device& device, const Tensor& device_grad, const Tensor& host_grad) const override {
    copy_to_host(device.stream(Lane::reduce_scatter), device_grad, host_grad);
  }
};

// As CopyBackOnReduceScatter, with the reference's wait of the memcpy stream kept: the gradient buffers are then
// ordered for their reuse, but `landed`, recorded on the memcpy stream, still does not cover the copy.
class CopyBackOnReduceScatterWaitKept final : public LikeTheReference {
 public:
  void copy_grad_to_host(Device& device, const Tensor& device_grad, const Tensor& host_grad) const override {
    device.wait_stream(Lane::memcpy, Lane::reduce_scatter);
    copy_to_host(device.stream(Lane::reduce_scatter), device_grad, host_grad);
  }
};

// The reduce-scatter stream made to wait for the copy back: right numbers, but every later reduction queues behind
// the copy of the one before (wait_stream's arguments read as "producer, waiter").
class ReductionsWaitForCopyBack final : public LikeTheReference {
 public:
  void copy_grad_to_host(Device& device, const Tensor& device_grad, const Tensor& host_grad) const override {
    reference().copy_grad_to_host(device, device_grad, host_grad);
    device.wait_stream(Lane::reduce_scatter, Lane::memcpy);
  }
};

// No host wait before the CPU step: the optimizer reads a gradient shard still in flight.
class NoHostWait final : public LikeTheReference {
 public:
  void wait_for_grad_on_host(Device&, const Event&) const override {}
};

// The whole device synchronized instead of the event: right, but the host waits for unrelated work too.
class WholeDeviceSync final : public LikeTheReference {
 public:
  void wait_for_grad_on_host(Device& device, const Event&) const override { device.synchronize(); }
};

// The memcpy stream synchronized instead of the event: right, but the host waits for the copies up issued after it.
class MemcpyStreamSync final : public LikeTheReference {
 public:
  void wait_for_grad_on_host(Device& device, const Event&) const override { device.synchronize(Lane::memcpy); }
};

// The copy up ordered after the compute stream's work too, "to be safe": the copy, and the gather behind it, no longer
// run under the unit computing now.
class CopyUpWaitsForCompute final : public LikeTheReference {
 public:
  void copy_shard_to_device(Device& device, const Tensor& host_shard, const Tensor& device_copy) const override {
    device.wait_stream(Lane::memcpy, Lane::compute);
    reference().copy_shard_to_device(device, host_shard, device_copy);
  }
};

// The copy up ordered after the reduce-scatter stream too, "so the memcpy stream's two directions do not cross".
class CopyUpWaitsForReductions final : public LikeTheReference {
 public:
  void copy_shard_to_device(Device& device, const Tensor& host_shard, const Tensor& device_copy) const override {
    device.wait_stream(Lane::memcpy, Lane::reduce_scatter);
    reference().copy_shard_to_device(device, host_shard, device_copy);
  }
};

// The copy up's wait pasted into the copy back: the copy back waits for every gather issued before it too.
class CopyBackWaitsForGathers final : public LikeTheReference {
 public:
  void copy_grad_to_host(Device& device, const Tensor& device_grad, const Tensor& host_grad) const override {
    device.wait_stream(Lane::memcpy, Lane::all_gather);
    reference().copy_grad_to_host(device, device_grad, host_grad);
  }
};

}  // namespace

std::span<const Mutant> cpu_offload_mutants() {
  static const Mutant mutants[] = {
      {9, "h2d-host-sync", "copy_shard_to_device makes the host wait for the copy (a host sync in the copy path)",
       instance<H2dHostSync>},
      {9, "h2d-on-all-gather", "the copy to the device is issued on the all-gather stream instead of the memcpy stream",
       instance<H2dOnAllGather>},
      {9, "gather-no-wait", "the all-gather stream is not made to wait for the copy of the shard to the device",
       instance<GatherNoWait>},
      {9, "copy-before-gathers-done",
       "the copy to the device is not ordered after the all-gather stream's earlier gathers",
       instance<CopyBeforeGathersDone>},
      {9, "compute-waits-for-copy-up", "the compute stream is made to wait for the copy of the shard to the device",
       instance<ComputeWaitsForCopyUp>},
      {9, "copy-back-before-reduction", "the copy of the gradient to the host does not wait for the reduction",
       instance<CopyBackBeforeReduction>},
      {9, "copy-back-on-reduce-scatter", "the copy of the gradient to the host is issued on the reduce-scatter stream",
       instance<CopyBackOnReduceScatter>},
      {9, "copy-back-on-reduce-scatter-wait-kept",
       "the memcpy stream waits for the reduction, and the copy to the host is issued on the reduce-scatter stream all "
       "the same",
       instance<CopyBackOnReduceScatterWaitKept>},
      {9, "reductions-wait-for-copy-back",
       "the reduce-scatter stream is made to wait for the copy of the gradient to the host",
       instance<ReductionsWaitForCopyBack>},
      {9, "no-host-wait", "wait_for_grad_on_host waits for nothing: the CPU step reads a gradient still in flight",
       instance<NoHostWait>},
      {9, "whole-device-sync", "wait_for_grad_on_host synchronizes the whole device instead of the `landed` event",
       instance<WholeDeviceSync>},
      {9, "memcpy-stream-sync",
       "wait_for_grad_on_host synchronizes the memcpy stream instead of the `landed` event, waiting for later copies",
       instance<MemcpyStreamSync>},
      {9, "copy-up-waits-for-compute",
       "the copy up waits for the compute stream too, so it no longer runs under compute",
       instance<CopyUpWaitsForCompute>},
      {9, "copy-up-waits-for-reductions", "the copy up waits for the reduce-scatter stream too",
       instance<CopyUpWaitsForReductions>},
      {9, "copy-back-waits-for-gathers",
       "the copy back waits for the all-gather stream too (the copy up's wait, pasted)",
       instance<CopyBackWaitsForGathers>},
  };
  return mutants;
}

}  // namespace fsdplab
