// The reference forward (task 3): all-gather on the all-gather stream, an event for compute to wait on,
// free after forward unless the unit is the root or the strategy keeps it.
#include "engine/fsdp/forward_task.hpp"

namespace fsdplab {
namespace {

class ReferenceForward final : public ForwardTask {
 public:
  void all_gather(Device& device, Communicator& group, const Tensor& shard, const Tensor& full,
                  Event& gathered) const override {
    group.all_gather(device.stream(Lane::all_gather), shard, full);
    device.record(gathered, Lane::all_gather);
  }

  void wait_for_unshard(Device& device, const Event& gathered) const override {
    // See [Note: an event wait, not a host sync] (forward_task.hpp).
    device.wait(Lane::compute, gathered);
  }

  bool reshard_after_forward(ShardingStrategy strategy, bool is_root) const override {
    // The root's parameters are the first the backward needs: freeing them after forward would only
    // gather them again at once (PyTorch keeps the root gathered too). shard_grad_op keeps every unit
    // gathered until its backward: more memory, one gather less per unit.
    return !is_root && reshards_after_forward(strategy);
  }
};

}  // namespace

const ForwardTask& reference_forward() {
  static const ReferenceForward task;
  return task;
}

}  // namespace fsdplab
