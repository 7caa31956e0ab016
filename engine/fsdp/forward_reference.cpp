// The reference forward (task 3): unshard before a unit's forward, reshard after.
#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/tensor/elementwise.hpp"

namespace fsdplab {
namespace {

class ReferenceForward final : public ForwardTask {
 public:
  void unshard(FsdpUnit& unit, FsdpRank& rank) const override {
    if (unit.state == UnitState::unsharded) return;
    if (!unit.full.overlaps(unit.replica)) gather(unit, rank);
    rank.tasks.flat_parameter->point_views(unit.layout, unit.full, &Parameter::value);
    unit.state = UnitState::unsharded;
  }

  void reshard(FsdpUnit& unit, FsdpRank&) const override {
    if (unit.state == UnitState::sharded) return;
    // Freed at the host's time. The compute stream waited for the gather, so later compute work that
    // gets this block is ordered after every use of it; the collective streams order themselves
    // after compute before they write (unshard, post_backward).
    if (!unit.full.overlaps(unit.replica)) unit.full.storage().free();
    unit.state = UnitState::sharded;
  }

  void pre_forward(FsdpUnit& unit, FsdpRank& rank) const override { unshard(unit, rank); }

  void post_forward(FsdpUnit& unit, FsdpRank& rank) const override {
    if (unit.reshard_after_forward) reshard(unit, rank);
  }

 private:
  // Fills unit.full on the all-gather stream; the compute stream waits for it by an event.
  static void gather(FsdpUnit& unit, FsdpRank& rank) {
    Device& device = rank.device;
    const Stream stream = rank.all_gather_stream();
    // The gather writes memory the compute stream may have used until now (a block the caching
    // allocator hands out again) and reads the shard the optimizer last wrote on compute.
    rank.order(Lane::all_gather, Lane::compute);
    unit.full.storage().allocate();
    if (unit.replica.defined()) {
      // Replicated strategies hold the whole f32 parameters already: only the cast to param_dtype.
      cast(stream, unit.replica, unit.full);
    } else if (unit.master.dtype() == unit.full.dtype()) {
      rank.shard_group.all_gather(stream, unit.master, unit.full);
    } else {
      // Mixed precision: gather in param_dtype, half the bytes of the f32 master.
      const Tensor low = Tensor::empty(device, unit.master.shape(), unit.full.dtype(), MemTag::comm_buffer,
                                       unit.name + ".shard_" + std::string(dtype_name(unit.full.dtype())));
      cast(stream, unit.master, low);
      rank.shard_group.all_gather(stream, low, unit.full);
    }
    device.record(unit.gathered, Lane::all_gather);
    device.wait(Lane::compute, unit.gathered);
  }
};

}  // namespace

const ForwardTask& reference_forward() {
  static const ReferenceForward task;
  return task;
}

}  // namespace fsdplab
