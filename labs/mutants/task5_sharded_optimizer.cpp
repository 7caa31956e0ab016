// Task 5's mutants: the pitfalls of labs/05-sharded-optimizer/README.md, each the reference
// (engine/fsdp/sharded_optimizer_reference.cpp) with one defect. The methods a mutant gets right are the
// reference's, called through reference_sharded_optimizer() (LikeTheReference), so the grader's diagnostic
// can only come from the one method that is wrong.
#include <vector>

#include "engine/fsdp/sharded_optimizer.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/tensor/reduce.hpp"
#include "labs/mutants/mutants.hpp"

namespace fsdplab {
namespace {

const ShardedOptimizerTask& reference() { return reference_sharded_optimizer(); }

// The gathers of the reference's all_gather_updates, without the events around them.
void gather_every_unit(Device& device, Communicator& group, std::span<const UnitShards> units) {
  for (const UnitShards& unit : units) group.all_gather(device.stream(Lane::all_gather), unit.master, unit.replica);
}

// Forwards every call to the reference; a mutant overrides the one it gets wrong.
class LikeTheReference : public ShardedOptimizerTask {
 public:
  explicit LikeTheReference(std::source_location origin = std::source_location::current())
      : ShardedOptimizerTask(origin) {}
  std::unique_ptr<Optimizer> make(std::span<const UnitShards> units, const OptimizerSpec& spec) const override {
    return reference().make(units, spec);
  }
  void step(Optimizer& optimizer, Stream stream) const override { reference().step(optimizer, stream); }
  void all_gather_updates(Device& device, Communicator& group, std::span<const UnitShards> units) const override {
    reference().all_gather_updates(device, group, units);
  }
  void clip_grad_norm(Communicator& group, std::span<const UnitShards> units, double max_norm,
                      const Tensor& squared_norm, Stream stream) const override {
    reference().clip_grad_norm(group, units, max_norm, squared_norm, stream);
  }
};

// Two optimizer.step calls per step: every update doubled, AdamW's step count advanced twice.
class StepTwice final : public LikeTheReference {
 public:
  void step(Optimizer& optimizer, Stream stream) const override {
    optimizer.step(stream);
    optimizer.step(stream);
  }
};

// The whole replica given to the optimizer where there is one (zero1, zero2): a target W times the shard,
// whose gradient is one chunk, so make_optimizer refuses it; were it accepted, the state would be whole.
class ReplicaTarget final : public LikeTheReference {
 public:
  std::unique_ptr<Optimizer> make(std::span<const UnitShards> units, const OptimizerSpec& spec) const override {
    std::vector<OptimTarget> targets;
    for (const UnitShards& unit : units)
      targets.push_back({unit.name, unit.replica.defined() ? unit.replica : unit.master, unit.grad_shard});
    return make_optimizer(spec, std::move(targets));
  }
};

// The replica given to the optimizer whatever the strategy: under full sharding a unit has none.
class ReplicaAlways final : public LikeTheReference {
 public:
  std::unique_ptr<Optimizer> make(std::span<const UnitShards> units, const OptimizerSpec& spec) const override {
    std::vector<OptimTarget> targets;
    for (const UnitShards& unit : units) targets.push_back({unit.name, unit.replica, unit.grad_shard});
    return make_optimizer(spec, std::move(targets));
  }
};

// No gather after the update: each rank's replica keeps the other ranks' chunks as they were.
class NoZeroGather final : public LikeTheReference {
 public:
  void all_gather_updates(Device&, Communicator&, std::span<const UnitShards>) const override {}
};

// The gathers issued without waiting for the compute stream's update: they may read chunks half updated.
class GatherBeforeUpdate final : public LikeTheReference {
 public:
  void all_gather_updates(Device& device, Communicator& group, std::span<const UnitShards> units) const override {
    gather_every_unit(device, group, units);
    Event gathered("fsdp.updates_gathered");
    device.record(gathered, Lane::all_gather);
    device.wait(Lane::compute, gathered);
  }
};

// The update's event recorded on the all-gather stream, which the gathers follow anyway: it orders nothing against the
// update on the compute stream.
class UpdateEventOnAllGather final : public LikeTheReference {
 public:
  void all_gather_updates(Device& device, Communicator& group, std::span<const UnitShards> units) const override {
    Event updated("fsdp.optimizer_updated");
    device.record(updated, Lane::all_gather);  // not Lane::compute
    device.wait(Lane::all_gather, updated);
    gather_every_unit(device, group, units);
    Event gathered("fsdp.updates_gathered");
    device.record(gathered, Lane::all_gather);
    device.wait(Lane::compute, gathered);
  }
};

// The compute stream never told to wait for the gathers: the next forward may read a replica being written.
class ComputeNoWait final : public LikeTheReference {
 public:
  void all_gather_updates(Device& device, Communicator& group, std::span<const UnitShards> units) const override {
    Event updated("fsdp.optimizer_updated");
    device.record(updated, Lane::compute);
    device.wait(Lane::all_gather, updated);
    gather_every_unit(device, group, units);
  }
};

// The assignment's "broadcast after step" taken literally: each rank's chunk broadcast from it, W collectives a unit
// where one all-gather moves the same bytes. Right values, W times the collectives.
class BroadcastsAfterStep final : public LikeTheReference {
 public:
  void all_gather_updates(Device& device, Communicator& group, std::span<const UnitShards> units) const override {
    Event updated("fsdp.optimizer_updated");
    device.record(updated, Lane::compute);
    device.wait(Lane::all_gather, updated);
    for (const UnitShards& unit : units) {
      const std::int64_t chunk = unit.master.numel();
      for (int root = 0; root < group.world(); ++root)
        group.broadcast(device.stream(Lane::all_gather), unit.replica.rows(root * chunk, chunk), root);
    }
    Event gathered("fsdp.updates_gathered");
    device.record(gathered, Lane::all_gather);
    device.wait(Lane::compute, gathered);
  }
};

// Host waits instead of events: correct, but the host stalls until the update, then until the gathers.
class GatherHostSync final : public LikeTheReference {
 public:
  void all_gather_updates(Device& device, Communicator& group, std::span<const UnitShards> units) const override {
    device.synchronize(Lane::compute);
    gather_every_unit(device, group, units);
    device.synchronize(Lane::all_gather);
  }
};

// Not trusting the in-place gather: each unit gathered into a buffer of its own, then copied into its replica (the
// values right; a whole unit's memory more and a pass over it).
class GatherIntoTemporary final : public LikeTheReference {
 public:
  void all_gather_updates(Device& device, Communicator& group, std::span<const UnitShards> units) const override {
    Event updated("fsdp.optimizer_updated");
    device.record(updated, Lane::compute);
    device.wait(Lane::all_gather, updated);
    const Stream stream = device.stream(Lane::all_gather);
    for (const UnitShards& unit : units) {
      const Tensor whole = Tensor::empty(device, unit.replica.shape(), DType::f32, MemTag::param_full,
                                         unit.name + ".updated", Lane::all_gather);
      group.all_gather(stream, unit.master, whole);
      copy(stream, whole, unit.replica);
    }
    Event gathered("fsdp.updates_gathered");
    device.record(gathered, Lane::all_gather);
    device.wait(Lane::compute, gathered);
  }
};

// This rank's squared norm in `squared_norm`: each unit's sum of squares, added up. The reference's first half.
void my_squared_norm(std::span<const UnitShards> units, const Tensor& squared_norm, Stream stream) {
  const auto count = static_cast<std::int64_t>(units.size());
  const Tensor unit_sums =
      Tensor::empty(*stream.device, {count}, DType::f32, MemTag::workspace, "clip_grad_norm.unit_squares", stream.lane);
  for (std::int64_t u = 0; u < count; ++u)
    sum_of_squares(stream, units[static_cast<std::size_t>(u)].grad_shard, unit_sums.view(u, {1}));
  sum(stream, unit_sums, squared_norm);
}

// The classic mistake: the norm of this rank's shards taken for the model's. Each rank scales by its own factor.
class LocalNorm final : public LikeTheReference {
 public:
  void clip_grad_norm(Communicator&, std::span<const UnitShards> units, double max_norm, const Tensor& squared_norm,
                      Stream stream) const override {
    my_squared_norm(units, squared_norm, stream);
    for (const UnitShards& unit : units) clip_grad_with_norm(stream, unit.grad_shard, squared_norm, max_norm);
  }
};

// The ranks' squares averaged, as the gradients are, instead of added: the norm 1/sqrt(S) of the model's.
class AveragedSquares final : public LikeTheReference {
 public:
  void clip_grad_norm(Communicator& group, std::span<const UnitShards> units, double max_norm,
                      const Tensor& squared_norm, Stream stream) const override {
    my_squared_norm(units, squared_norm, stream);
    group.all_reduce(stream, squared_norm, ReduceOp::avg);
    for (const UnitShards& unit : units) clip_grad_with_norm(stream, unit.grad_shard, squared_norm, max_norm);
  }
};

// Each unit clipped by its own norm (as if clip_grad_norm_ were called once per unit): every unit's norm at most
// max_norm, the model's up to sqrt(units) times it.
class PerUnitNorm final : public LikeTheReference {
 public:
  void clip_grad_norm(Communicator& group, std::span<const UnitShards> units, double max_norm,
                      const Tensor& squared_norm, Stream stream) const override {
    const Tensor unit_norm =
        Tensor::empty(*stream.device, {1}, DType::f32, MemTag::workspace, "clip_grad_norm.unit", stream.lane);
    for (const UnitShards& unit : units) {
      sum_of_squares(stream, unit.grad_shard, unit_norm);
      group.all_reduce(stream, unit_norm, ReduceOp::sum);
      clip_grad_with_norm(stream, unit.grad_shard, unit_norm, max_norm);
    }
    my_squared_norm(units, squared_norm, stream);  // what the run reports: the norm after clipping
    group.all_reduce(stream, squared_norm, ReduceOp::sum);
  }
};

}  // namespace

std::span<const Mutant> sharded_optimizer_mutants() {
  static const Mutant mutants[] = {
      {5, "step-twice", "step calls optimizer.step twice: every update doubled and AdamW's step count advanced twice",
       instance<StepTwice>},
      {5, "replica-target", "make gives the optimizer the whole replica instead of the master shard under zero1/zero2",
       instance<ReplicaTarget>},
      {5, "replica-always", "make gives the optimizer unit.replica under full sharding too, where there is none",
       instance<ReplicaAlways>},
      {5, "no-zero-gather", "all_gather_updates gathers nothing: each rank's replica keeps the other chunks un-updated",
       instance<NoZeroGather>},
      {5, "gather-before-update", "the update gathers do not wait for the compute stream's update (no event)",
       instance<GatherBeforeUpdate>},
      {5, "update-event-on-all-gather",
       "the event the update gathers wait for is recorded on the all-gather stream, not after the update on compute",
       instance<UpdateEventOnAllGather>},
      {5, "compute-no-wait", "the compute stream is not made to wait for the update gathers before the next forward",
       instance<ComputeNoWait>},
      {5, "broadcasts-after-step",
       "all_gather_updates broadcasts each rank's chunk (W collectives a unit), not one gather",
       instance<BroadcastsAfterStep>},
      {5, "gather-host-sync", "all_gather_updates orders the gathers with host waits (synchronize) instead of events",
       instance<GatherHostSync>},
      {5, "gather-into-temporary",
       "gathers each unit into a buffer of its own and copies it into the replica, where the gather writes it in place",
       instance<GatherIntoTemporary>},
      {5, "clip-local-norm", "clip_grad_norm clips by this rank's shards' norm, never all-reduced over the shard group",
       instance<LocalNorm>},
      {5, "clip-averaged-squares",
       "clip_grad_norm averages the ranks' sums of squares (ReduceOp::avg, as gradients) instead of adding them",
       instance<AveragedSquares>},
      {5, "clip-per-unit", "clip_grad_norm clips each unit by its own norm, not the whole model's",
       instance<PerUnitNorm>},
  };
  return mutants;
}

}  // namespace fsdplab
