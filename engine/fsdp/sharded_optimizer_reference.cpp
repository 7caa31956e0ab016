// The reference sharded optimizer (task 5): an optimizer given only this rank's shards, so its state is
// sharded too; the ZeRO forms gather the updated chunks back into the whole parameters.
#include <vector>

#include "engine/fsdp/sharded_optimizer.hpp"

namespace fsdplab {
namespace {

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
};

}  // namespace

const ShardedOptimizerTask& reference_sharded_optimizer() {
  static const ReferenceShardedOptimizer task;
  return task;
}

}  // namespace fsdplab
