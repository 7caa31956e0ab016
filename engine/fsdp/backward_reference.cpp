// The reference backward (task 4): zero the full gradient, then reduce-scatter it into the shard as the
// mean over the group.
#include "engine/fsdp/backward_task.hpp"
#include "engine/tensor/elementwise.hpp"

namespace fsdplab {
namespace {

class ReferenceBackward final : public BackwardTask {
 public:
  void zero_gradient(Device& device, const Tensor& grad_full) const override {
    fill(device.stream(Lane::compute), grad_full, 0);  // backward ops add into gradients
  }

  void reduce_scatter(Device& device, Communicator& group, const Tensor& grad_full,
                      const Tensor& grad_shard) const override {
    // The reduction reads what the compute stream has just written: its stream waits for compute by an
    // event (never the host), so the next unit's backward computes while this gradient is on the link.
    Event computed("fsdp.grad_computed");
    device.record(computed, Lane::compute);
    device.wait(Lane::reduce_scatter, computed);
    // avg: each rank computed the gradient of its own rows' mean loss, so the mean over the ranks is the
    // gradient of the whole batch's mean loss — the single-rank baseline's. See [Note: sum or mean]
    // (backward_task.hpp).
    group.reduce_scatter(device.stream(Lane::reduce_scatter), grad_full, grad_shard, ReduceOp::avg);
  }
};

}  // namespace

const BackwardTask& reference_backward() {
  static const ReferenceBackward task;
  return task;
}

}  // namespace fsdplab
