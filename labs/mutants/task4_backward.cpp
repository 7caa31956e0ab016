// Task 4's mutants: BackwardTask (engine/fsdp/backward_task.hpp), each the reference
// (engine/fsdp/backward_reference.cpp) with one pitfall of labs/04-backward/README.md; the method a
// mutant does not break is the reference's (LikeTheReference). The grader's checks of task 4
// (grader/checks/task4_backward.cpp) must catch every one and name its mistake.
#include "engine/fsdp/backward_task.hpp"
#include "engine/tensor/elementwise.hpp"
#include "labs/mutants/mutants.hpp"

namespace fsdplab {
namespace {

const BackwardTask& reference() { return reference_backward(); }

// Forwards every call to the reference; a mutant overrides the one it gets wrong.
class LikeTheReference : public BackwardTask {
 public:
  explicit LikeTheReference(std::source_location origin = std::source_location::current()) : BackwardTask(origin) {}
  void zero_gradient(Device& device, const Tensor& grad_full) const override {
    reference().zero_gradient(device, grad_full);
  }
  void reduce_scatter(Device& device, Communicator& group, const Tensor& grad_full,
                      const Tensor& grad_shard) const override {
    reference().reduce_scatter(device, group, grad_full, grad_shard);
  }
};

// The W gradients summed, not averaged: SGD steps W times too long (AdamW hides it).
class SumNotMean final : public LikeTheReference {
 public:
  void reduce_scatter(Device& device, Communicator& group, const Tensor& grad_full,
                      const Tensor& grad_shard) const override {
    Event computed("fsdp.grad_computed");
    device.record(computed, Lane::compute);
    device.wait(Lane::reduce_scatter, computed);
    group.reduce_scatter(device.stream(Lane::reduce_scatter), grad_full, grad_shard, ReduceOp::sum);  // not avg
  }
};

// Averaged twice: ReduceOp::avg, then a scale by 1/W the avg already did. SGD steps W times too short, and the
// scale on the reduce-scatter stream delays every reduction after it.
class AveragesTwice final : public LikeTheReference {
 public:
  void reduce_scatter(Device& device, Communicator& group, const Tensor& grad_full,
                      const Tensor& grad_shard) const override {
    reference().reduce_scatter(device, group, grad_full, grad_shard);
    scale(device.stream(Lane::reduce_scatter), grad_shard, 1.0f / static_cast<float>(group.world()), grad_shard);
  }
};

// No event between the backward and the reduction: the reduce-scatter stream reads an unfinished gradient.
class MissingWait final : public LikeTheReference {
 public:
  void reduce_scatter(Device& device, Communicator& group, const Tensor& grad_full,
                      const Tensor& grad_shard) const override {
    group.reduce_scatter(device.stream(Lane::reduce_scatter), grad_full, grad_shard, ReduceOp::avg);
  }
};

// The event recorded on the stream that waits for it: the wait orders the reduction after nothing it did not follow
// already, and the reduce-scatter stream reads an unfinished gradient as without one.
class EventOnTheWaitingStream final : public LikeTheReference {
 public:
  void reduce_scatter(Device& device, Communicator& group, const Tensor& grad_full,
                      const Tensor& grad_shard) const override {
    Event written("fsdp.grad_full_written");
    device.record(written, Lane::reduce_scatter);
    device.wait(Lane::reduce_scatter, written);
    group.reduce_scatter(device.stream(Lane::reduce_scatter), grad_full, grad_shard, ReduceOp::avg);
  }
};

// The reduction on the compute stream: right numbers, but the next unit's backward waits for it.
class ReduceOnCompute final : public LikeTheReference {
 public:
  void reduce_scatter(Device& device, Communicator& group, const Tensor& grad_full,
                      const Tensor& grad_shard) const override {
    group.reduce_scatter(device.stream(Lane::compute), grad_full, grad_shard, ReduceOp::avg);
  }
};

// The host waits for the backward instead of the reduce-scatter stream: right numbers, the CPU stops
// running ahead.
class HostSync final : public LikeTheReference {
 public:
  void reduce_scatter(Device& device, Communicator& group, const Tensor& grad_full,
                      const Tensor& grad_shard) const override {
    device.synchronize(Lane::compute);  // not an event the reduce-scatter stream waits for
    group.reduce_scatter(device.stream(Lane::reduce_scatter), grad_full, grad_shard, ReduceOp::avg);
  }
};

// The full gradient never zeroed: the backward adds to whatever the cached block held.
class Unzeroed final : public LikeTheReference {
 public:
  void zero_gradient(Device&, const Tensor&) const override {}  // no fill
};

// Zeroed on the reduce-scatter stream, which nothing orders before the backward's writes on compute.
class ZeroOnReduceStream final : public LikeTheReference {
 public:
  void zero_gradient(Device& device, const Tensor& grad_full) const override {
    fill(device.stream(Lane::reduce_scatter), grad_full, 0);  // not Lane::compute
  }
};

// "The mean over one rank is the gradient itself": at W = 1 grad_full is copied into grad_shard on the compute
// stream, no reduction on the reduce-scatter stream. Right in f32; under bf16 (the lifecycle widens the gradient on
// the reduce-scatter stream) or --offload (the D2H copy waits for the reduce-scatter stream only) it races.
// reduction-stream calls reduce_scatter at W = 1 too.
class CopiesOnComputeAtW1 final : public LikeTheReference {
 public:
  void reduce_scatter(Device& device, Communicator& group, const Tensor& grad_full,
                      const Tensor& grad_shard) const override {
    if (group.world() > 1) {
      reference().reduce_scatter(device, group, grad_full, grad_shard);
      return;
    }
    copy(device.stream(Lane::compute), grad_full, grad_shard);  // not a reduce-scatter on its own stream
  }
};

}  // namespace

std::span<const Mutant> backward_mutants() {
  static const Mutant mutants[] = {
      {4, "sum-not-mean", "the gradients are summed over the ranks (ReduceOp::sum) instead of averaged",
       instance<SumNotMean>},
      {4, "averages-twice", "ReduceOp::avg and then a scale by 1/W: the gradient W times too small",
       instance<AveragesTwice>},
      {4, "missing-wait", "the reduce-scatter stream does not wait for the compute stream's event before reducing",
       instance<MissingWait>},
      {4, "event-on-the-waiting-stream",
       "records the backward's event on the reduce-scatter stream, which then waits for its own work only",
       instance<EventOnTheWaitingStream>},
      {4, "reduce-on-compute",
       "the reduce-scatter is issued on the compute stream instead of the reduce-scatter stream",
       instance<ReduceOnCompute>},
      {4, "host-sync", "a host sync (device.synchronize(Lane::compute)) instead of an event before the reduction",
       instance<HostSync>},
      {4, "unzeroed", "zero_gradient does nothing: the backward adds into the cached block's old contents",
       instance<Unzeroed>},
      {4, "zero-on-reduce-stream",
       "zero_gradient fills on the reduce-scatter stream, unordered with the compute stream",
       instance<ZeroOnReduceStream>},
      {4, "copies-on-compute-at-w1",
       "at W = 1 the gradient is copied into the shard on the compute stream instead of reduced on the "
       "reduce-scatter stream",
       instance<CopiesOnComputeAtW1>},
  };
  return mutants;
}

}  // namespace fsdplab
