// The reference forward (task 3): unshard before a unit's forward, reshard after.
#include "engine/fsdp/cpu_offload.hpp"
#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/tensor/elementwise.hpp"

namespace fsdplab {
namespace {

// False for replicated strategies in f32, whose `full` is the replica itself: nothing to gather or free.
bool owns_full(const FsdpUnit& unit) { return !unit.full.overlaps(unit.replica); }

class ReferenceForward final : public ForwardTask {
 public:
  bool prefetch(FsdpUnit& unit, FsdpRank& rank) const override {
    if (unit.state != UnitState::sharded) return true;
    if (owns_full(unit)) {
      if (!rank.tasks.overlap->acquire_full(unit, rank, /*prefetch=*/true)) return false;
      gather(unit, rank);
    }
    unit.state = UnitState::gathering;
    return true;
  }

  void unshard(FsdpUnit& unit, FsdpRank& rank) const override {
    if (unit.state == UnitState::unsharded) return;
    if (unit.state == UnitState::sharded && owns_full(unit)) {
      rank.tasks.overlap->acquire_full(unit, rank, /*prefetch=*/false);
      gather(unit, rank);
    }
    // The compute stream waits for this unit's gather and nothing else: an event wait, not a host
    // sync, so the host goes on issuing work (and later gathers) while the gather runs.
    if (owns_full(unit)) rank.device.wait(Lane::compute, unit.gathered);
    rank.tasks.flat_parameter->point_views(unit.layout, unit.full, &Parameter::value);
    unit.state = UnitState::unsharded;
  }

  void reshard(FsdpUnit& unit, FsdpRank& rank) const override {
    if (unit.state == UnitState::sharded) return;
    if (owns_full(unit)) rank.tasks.overlap->release_full(unit, rank);
    unit.state = UnitState::sharded;
  }

  void pre_forward(FsdpUnit& unit, FsdpRank& rank) const override {
    unshard(unit, rank);
    rank.tasks.overlap->after(PassPoint::pre_forward, unit, rank);
  }

  void post_forward(FsdpUnit& unit, FsdpRank& rank) const override {
    if (unit.reshard_after_forward) reshard(unit, rank);
    rank.tasks.overlap->after(PassPoint::post_forward, unit, rank);
  }

 private:
  // Fills unit.full on the all-gather stream and records unit.gathered there.
  static void gather(FsdpUnit& unit, FsdpRank& rank) {
    Device& device = rank.device;
    const Stream stream = rank.all_gather_stream();
    // A prefetch runs inside another unit's hook: the gather's ops carry the unit they gather.
    OpLabels labels = device.labels();
    labels.unit = unit.index;
    const LabelScope scope(device, std::move(labels));
    std::vector<Tensor> staging;
    if (unit.replica.defined()) {
      // Replicated strategies hold the whole f32 parameters already: only the cast to param_dtype.
      cast(stream, unit.replica, unit.full);
    } else {
      const Tensor shard = shard_on_device(unit, rank, "flat_param_shard_device");  // CPU offload: a copy
      if (!shard.overlaps(unit.master)) staging.push_back(shard);
      if (shard.dtype() == unit.full.dtype()) {
        rank.shard_group.all_gather(stream, shard, unit.full);
      } else {
        // Mixed precision: gather in param_dtype, half the bytes of the f32 master.
        const Tensor low = Tensor::empty(device, shard.shape(), unit.full.dtype(), MemTag::comm_buffer,
                                         unit.name + ".shard_" + std::string(dtype_name(unit.full.dtype())),
                                         Lane::all_gather);
        cast(stream, shard, low);
        rank.shard_group.all_gather(stream, low, unit.full);
        staging.push_back(low);
      }
    }
    device.record(unit.gathered, Lane::all_gather);
    for (Tensor& t : staging) rank.tasks.overlap->release_staging(std::move(t), unit.gathered, rank);
  }
};

}  // namespace

const ForwardTask& reference_forward() {
  static const ReferenceForward task;
  return task;
}

}  // namespace fsdplab
