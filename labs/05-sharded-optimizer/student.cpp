// labs/05-sharded-optimizer/student.cpp — task 5: your ShardedOptimizerTask (engine/fsdp/sharded_optimizer.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 5=student
#include "engine/fsdp/sharded_optimizer.hpp"
#include "engine/fsdp/lab_todo.hpp"

// make() builds a std::vector; clip_grad_norm sums squares:
#include <vector>

#include "engine/tensor/reduce.hpp"

namespace fsdplab {
namespace {

class StudentShardedOptimizer final : public ShardedOptimizerTask {
 public:
  // Called once, before step 1, with every unit's tensors (UnitShards: name, master, grad_shard, replica).
  // Contract: return an optimizer (make_optimizer, engine/optim/optimizer.hpp) that updates every unit's
  //   `master` (f32, this rank's chunk) from its `grad_shard` (f32, same shape): one target per unit, in
  //   the order given, named as the unit. The optimizer allocates its state beside what you give it, so
  //   giving it only the shards is what shards the state.
  // Engine calls: OptimTarget{name, param, grad}; make_optimizer(spec, std::vector<OptimTarget>).
  std::unique_ptr<Optimizer> make(std::span<const UnitShards> units, const OptimizerSpec& spec) const override {
    // TODO(task 5)
    todo(5, "ShardedOptimizerTask::make");
  }

  // Called once per step, after the backward. The engine has told the optimizer the order to update the
  // units in and to wait for each unit's gradient reduction just before its update (ASYNC).
  // Contract: one update of every target on `stream` (the engine picks it: compute, or the host lane
  //   under --offload). Exactly one: Optimizer::step also counts the step for AdamW's bias correction.
  // Engine calls: Optimizer::step(Stream).
  void step(Optimizer& optimizer, Stream stream) const override {
    // TODO(task 5)
    todo(5, "ShardedOptimizerTask::step");
  }

  // Called after step() under --strategy zero1 and zero2 only (parameters whole on every rank).
  // Contract: gather every unit's `master` (chunk group.rank() of `replica`) into its `replica` over
  //   `group`, on the all-gather stream, starting after the compute stream's update; then make the
  //   compute stream wait for the gathers before the next forward reads them. Events only: the host
  //   does not wait.
  // Engine calls: Event e("name"); device.record(e, Lane::...); device.wait(Lane::..., e);
  //   group.all_gather(device.stream(Lane::all_gather), shard, full).
  void all_gather_updates(Device& device, Communicator& group, std::span<const UnitShards> units) const override {
    // TODO(task 5)
    todo(5, "ShardedOptimizerTask::all_gather_updates");
  }

  // Called before step() in a run with --clip-grad-norm, once every unit's gradient is reduced, on the stream
  // step() will get.
  // Contract: write the squared 2-norm of the whole model's gradient into `squared_norm` (1 f32 element, the same
  //   on every rank of `group`, the shard group), then scale every unit's `grad_shard` by
  //   min(max_norm / (norm + 1e-6), 1). All on `stream`; the host never reads the norm. This rank's shards hold
  //   only its part of each gradient: README.md's "Clipping a sharded gradient". Under --offload `stream` is the
  //   host lane, where no collective runs: the sum crosses to the device and back (README.md says how).
  // Engine calls: sum_of_squares(stream, x, out) and sum(stream, x, out) (engine/tensor/reduce.hpp: out a
  //   1-element f32 tensor, e.g. t.view(i, {1})); Tensor::empty(*stream.device, {n}, DType::f32, MemTag::workspace,
  //   "name", stream.lane); group.all_reduce(stream, t, ReduceOp::sum);
  //   clip_grad_with_norm(stream, grad, squared_norm, max_norm) (engine/tensor/optimizer_ops.hpp).
  void clip_grad_norm(Communicator& group, std::span<const UnitShards> units, double max_norm,
                      const Tensor& squared_norm, Stream stream) const override {
    // TODO(task 5)
    todo(5, "ShardedOptimizerTask::clip_grad_norm");
  }
};

}  // namespace

const ShardedOptimizerTask& student_sharded_optimizer() {
  static const StudentShardedOptimizer task;
  return task;
}

}  // namespace fsdplab
