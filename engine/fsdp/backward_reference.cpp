// The reference backward (task 4): gather again for backward, reduce the gradients into the shard.
#include "engine/fsdp/cpu_offload.hpp"
#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/tensor/elementwise.hpp"

namespace fsdplab {
namespace {

class ReferenceBackward final : public BackwardTask {
 public:
  void pre_backward(FsdpUnit& unit, FsdpRank& rank) const override {
    rank.tasks.forward->unshard(unit, rank);  // a no-op when the forward kept the unit gathered
    if (!unit.grad_accumulated) {
      rank.tasks.overlap->acquire_grad(unit, rank);
      fill(rank.compute(), unit.grad_full, 0);  // backward ops add into gradients
    }
    rank.tasks.flat_parameter->point_views(unit.layout, unit.grad_full, &Parameter::grad);
    rank.tasks.overlap->after(PassPoint::pre_backward, unit, rank);
  }

  void post_backward(FsdpUnit& unit, FsdpRank& rank) const override {
    Device& device = rank.device;
    const Stream stream = rank.reduce_scatter_stream();
    // The reduction reads the gradients the compute stream has just finished writing.
    rank.order(Lane::reduce_scatter, Lane::compute);
    // The parameters' last use was this unit's backward: free them now, so a backward prefetch (issued
    // next, ahead of the reduction on the link) can take their place.
    rank.tasks.forward->reshard(unit, rank);
    rank.tasks.overlap->after(PassPoint::post_backward, unit, rank);
    // Accumulating: the next micro-batch's backward adds into this full gradient; nothing is reduced.
    unit.grad_accumulated = !rank.reduce_gradients;
    if (unit.grad_accumulated) return;

    Tensor grads = unit.grad_full;
    std::vector<Tensor> staging;
    Lane done = Lane::reduce_scatter;  // the stream whose work completes the reduced shard
    const DType reduce_dtype = rank.options.reduce_dtype;
    if (grads.dtype() != reduce_dtype) {
      // MixedPrecision's reduce_dtype: widen the bf16 gradients to f32 before summing W of them.
      Tensor wide = unit.grad_replica;
      if (!wide.defined()) {
        wide = Tensor::empty(device, grads.shape(), reduce_dtype, MemTag::comm_buffer, unit.name + ".grad_f32",
                             Lane::reduce_scatter);
        staging.push_back(wide);
      }
      cast(stream, grads, wide);
      grads = wide;
    }
    if (unit.grad_replica.defined()) {
      // no_shard and zero1: every rank keeps the whole gradient, averaged over all W ranks.
      if (rank.world.world() > 1) rank.world.all_reduce(stream, grads, ReduceOp::avg);
      if (!grads.overlaps(unit.grad_replica)) cast(stream, grads, unit.grad_replica);
    } else {
      // Average over the S ranks of the shard group, then over the W / S replicas of this shard:
      // the mean over all W ranks either way.
      const Tensor shard = grad_shard_on_device(unit, rank);  // CPU offload: copied to the host below
      if (!shard.overlaps(unit.grad_shard)) staging.push_back(shard);
      Tensor out = shard;
      if (reduce_dtype != shard.dtype()) {
        out = Tensor::empty(device, shard.shape(), reduce_dtype, MemTag::comm_buffer,
                            unit.name + ".grad_shard_" + std::string(dtype_name(reduce_dtype)), Lane::reduce_scatter);
        staging.push_back(out);
      }
      rank.shard_group.reduce_scatter(stream, grads, out, ReduceOp::avg);
      if (rank.replica_group.world() > 1) rank.replica_group.all_reduce(stream, out, ReduceOp::avg);
      if (!out.overlaps(shard)) cast(stream, out, shard);
      done = finish_grad_shard(unit, rank, shard);
    }
    device.record(unit.reduced, done);
    for (Tensor& t : staging) rank.tasks.overlap->release_staging(std::move(t), unit.reduced, rank);
    rank.tasks.overlap->release_grad(unit, rank);
  }
};

}  // namespace

const BackwardTask& reference_backward() {
  static const ReferenceBackward task;
  return task;
}

}  // namespace fsdplab
