// The reference sharded optimizer (task 5).
#include "engine/fsdp/fsdp_tasks.hpp"

namespace fsdplab {
namespace {

class ReferenceShardedOptimizer final : public ShardedOptimizerTask {
 public:
  std::unique_ptr<Optimizer> make(std::span<FsdpUnit* const> units, const OptimizerSpec& spec,
                                  FsdpRank&) const override {
    std::vector<OptimTarget> targets;
    for (FsdpUnit* unit : units) targets.push_back({unit->name, unit->master, unit->grad_shard});
    return make_optimizer(spec, std::move(targets));
  }

  void step(Optimizer& optimizer, std::span<FsdpUnit* const> units, FsdpRank& rank) const override {
    if (rank.options.offload) {
      // CPU offload: the CPU steps on the host shards, once the copies of the gradients have landed.
      for (const FsdpUnit* unit : units)
        if (unit->reduced.recorded()) rank.device.synchronize(unit->reduced);
      optimizer.step(rank.device.stream(Lane::host));
    } else {
      optimizer.step(rank.compute());
    }
    const bool zero = rank.options.strategy == ShardingStrategy::zero1 || rank.options.strategy == ShardingStrategy::zero2;
    if (!zero || rank.shard_group.world() == 1) return;
    // ZeRO: each rank updated only its chunk of the whole parameters; gathering the chunks in place
    // (master is chunk r of replica) makes every rank's parameters whole and equal again.
    rank.order(Lane::all_gather, Lane::compute);
    for (FsdpUnit* unit : units) rank.shard_group.all_gather(rank.all_gather_stream(), unit->master, unit->replica);
    rank.order(Lane::compute, Lane::all_gather);
  }
};

}  // namespace

const ShardedOptimizerTask& reference_sharded_optimizer() {
  static const ReferenceShardedOptimizer task;
  return task;
}

FsdpTasks reference_tasks() {
  return {&reference_meta_init(), &reference_flat_parameter(), &reference_forward(), &reference_backward(),
          &reference_sharded_optimizer(), &reference_overlap()};
}

}  // namespace fsdplab
