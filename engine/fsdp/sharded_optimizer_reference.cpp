// The reference sharded optimizer (task 5): an optimizer given only this rank's shards, so its state is
// sharded too; the ZeRO forms gather the updated chunks back into the whole parameters.
#include <vector>

#include "engine/fsdp/sharded_optimizer.hpp"
#include "engine/tensor/host_copy.hpp"
#include "engine/tensor/reduce.hpp"

namespace fsdplab {
namespace {

// [Note: clipping a sharded gradient]
// clip_grad_norm_ scales the gradient so that its 2-norm over the whole model is at most max_norm. Under FSDP a
// rank holds 1/S of every unit's (averaged) gradient, so the norm of its own shards is not the model's: clipping by
// it would scale each rank's shards by a different factor, as if each rank had trained a different model. The
// squares add up across shards, though (the shards of a shard group cut every unit's flat gradient into disjoint
// pieces; the padding is 0), so
//   squared_norm = all_reduce_sum over the shard group of (sum over my shards of g^2)
// is the model's on every rank; in the replicated strategies the shard is the rank's chunk of the whole gradient,
// and under hybrid sharding every replica group holds the same shards, so the shard group alone adds them up. One
// scalar all-reduce; the scale min(max_norm / (norm + 1e-6), 1) is then computed on each rank's device from the
// same value, with no host round trip.
// The cost is in the schedule: the norm needs every unit's reduced gradient, so no update can start before the
// last reduction (the root's, the largest) ends. The per-unit optimizer steps that hide it
// ([Note: per-unit optimizer steps], engine/fsdp/unit_lifecycle.cpp) wait for the all-reduce instead.

// The sum of `t` (one f32) over `group`, in place on `stream`. Collectives run on the device's streams: under CPU
// offload (`stream` the host lane, `t` in host memory) the value crosses to the device, is all-reduced on the compute
// stream and comes back, and the host waits for it there, as PyTorch's offloaded clip_grad_norm_ does.
void add_over_group(Communicator& group, const Tensor& t, Stream stream) {
  if (stream.lane != Lane::host) {
    group.all_reduce(stream, t, ReduceOp::sum);
    return;
  }
  Device& device = *stream.device;
  const Stream compute = device.stream(Lane::compute);
  const Tensor on_device = Tensor::empty(device, {1}, DType::f32, MemTag::workspace, "clip_grad_norm.squared_norm");
  copy_to_device(compute, t, on_device);
  group.all_reduce(compute, on_device, ReduceOp::sum);
  copy_to_host(compute, on_device, t);
  device.synchronize(Lane::compute);  // the host's next op reads t
}

class ReferenceShardedOptimizer final : public ShardedOptimizerTask {
 public:
  std::unique_ptr<Optimizer> make(std::span<const UnitShards> units, const OptimizerSpec& spec) const override {
    // One (parameter, gradient) pair per unit: the f32 master shard and the gradient shard. The optimizer
    // allocates its state beside each pair, so a rank holds 1/W of AdamW's m and v.
    std::vector<OptimTarget> targets;
    for (const UnitShards& unit : units) targets.push_back({unit.name, unit.master, unit.grad_shard});
    return make_optimizer(spec, std::move(targets));
  }

  void step(Optimizer& optimizer, Stream stream) const override { optimizer.step(stream); }

  void all_gather_updates(Device& device, Communicator& group, std::span<const UnitShards> units) const override {
    // The gathers read the chunks the compute stream has just updated, and the next forward reads what
    // they write: an event each way, the host never waits. Gathering in place works because `master` is
    // chunk r of `replica`.
    Event updated("fsdp.optimizer_updated");
    device.record(updated, Lane::compute);
    device.wait(Lane::all_gather, updated);
    for (const UnitShards& unit : units) group.all_gather(device.stream(Lane::all_gather), unit.master, unit.replica);
    Event gathered("fsdp.updates_gathered");
    device.record(gathered, Lane::all_gather);
    device.wait(Lane::compute, gathered);
  }

  void clip_grad_norm(Communicator& group, std::span<const UnitShards> units, double max_norm,
                      const Tensor& squared_norm, Stream stream) const override {
    // See [Note: clipping a sharded gradient]. Each unit's sum of squares into an element of its own, their sum
    // into squared_norm (both accumulated in double), and the sum over the shard group: the whole model's.
    const auto count = static_cast<std::int64_t>(units.size());
    const Tensor unit_sums = Tensor::empty(*stream.device, {count}, DType::f32, MemTag::workspace,
                                           "clip_grad_norm.unit_squares", stream.lane);
    for (std::int64_t u = 0; u < count; ++u)
      sum_of_squares(stream, units[static_cast<std::size_t>(u)].grad_shard, unit_sums.view(u, {1}));
    sum(stream, unit_sums, squared_norm);
    add_over_group(group, squared_norm, stream);
    // Every rank scales by the same coefficient, computed from the same norm on the device.
    for (const UnitShards& unit : units) clip_grad_with_norm(stream, unit.grad_shard, squared_norm, max_norm);
  }
};

}  // namespace

const ShardedOptimizerTask& reference_sharded_optimizer() {
  static const ReferenceShardedOptimizer task;
  return task;
}

}  // namespace fsdplab
