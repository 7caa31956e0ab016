#include "engine/fsdp/unit_lifecycle.hpp"

#include <utility>
#include <vector>

#include "engine/fsdp/fsdp_events.hpp"
#include "engine/tensor/elementwise.hpp"

namespace fsdplab {
namespace {

// False for replicated strategies in f32, whose `full` is the replica itself: nothing to gather or free.
bool owns_full(const FsdpUnit& unit) { return !unit.full.overlaps(unit.replica); }

// True for a unit whose f32 master lives in host memory (CPU offload).
bool offloaded(const FsdpUnit& unit) { return unit.master.storage().stream() == Lane::host; }

}  // namespace

// ==== the hooks ======================================================================================

void UnitLifecycle::enter_forward() {
  OverlapState& s = rank_.schedule;
  if (s.pass == Pass::forward) return;
  s.pass = Pass::forward;
  const ActivityScope activity(rank_, 6, "OverlapTask::begin_forward", *tasks_.overlap);
  tasks_.overlap->begin_forward(rank_);
}

void UnitLifecycle::enter_backward() { rank_.schedule.pass = Pass::backward; }

void UnitLifecycle::leave_backward_if_last() {
  OverlapState& s = rank_.schedule;
  if (++s.post_backwards_seen < s.units.size()) return;
  const ActivityScope activity(rank_, 6, "OverlapTask::end_backward", *tasks_.overlap);
  tasks_.overlap->end_backward(rank_);
  s.pass = Pass::idle;
  s.post_backwards_seen = 0;
}

void UnitLifecycle::pre_forward(FsdpUnit& unit) {
  const UnitState before = unit.state;
  const ActivityScope activity(rank_, 3, "ForwardTask::all_gather, wait_for_unshard", *tasks_.forward, unit.index);
  unshard(unit);
  prefetch_after(PassPoint::pre_forward, unit);
  report_unit_event(rank_, unit, FsdpEventKind::pre_forward, before);
}

void UnitLifecycle::post_forward(FsdpUnit& unit) {
  const UnitState before = unit.state;
  const ActivityScope activity(rank_, 3, "ForwardTask::reshard_after_forward", *tasks_.forward, unit.index);
  if (unit.reshard_after_forward) reshard(unit);
  prefetch_after(PassPoint::post_forward, unit);
  report_unit_event(rank_, unit, FsdpEventKind::post_forward, before);
}

void UnitLifecycle::pre_backward(FsdpUnit& unit) {
  const UnitState before = unit.state;
  const ActivityScope activity(rank_, 4, "BackwardTask::zero_gradient", *tasks_.backward, unit.index);
  unshard(unit);  // again, when the forward resharded it
  if (!unit.grad_accumulated) {  // accumulating: the backward adds to the earlier micro-batches' gradient
    tasks_.overlap->acquire_grad(unit, rank_);
    tasks_.backward->zero_gradient(rank_.device, unit.grad_full);
  }
  tasks_.flat_parameter->point_views(unit.layout, unit.grad_full, &Parameter::grad);
  prefetch_after(PassPoint::pre_backward, unit);
  report_unit_event(rank_, unit, FsdpEventKind::pre_backward, before);
}

void UnitLifecycle::post_backward(FsdpUnit& unit) {
  const UnitState before = unit.state;
  const ActivityScope activity(rank_, 4, "BackwardTask::reduce_scatter", *tasks_.backward, unit.index);
  // The parameters' last use was this unit's backward: free them now, so a backward prefetch (issued
  // next, ahead of the reduction on the link) can take their place.
  reshard(unit);
  prefetch_after(PassPoint::post_backward, unit);
  // Gradient accumulation (PyTorch's no_sync): the next micro-batch's backward adds into this full
  // gradient; nothing is reduced until the last.
  unit.grad_accumulated = !rank_.reduce_gradients;
  if (!unit.grad_accumulated) reduce_gradient(unit);
  report_unit_event(rank_, unit, FsdpEventKind::post_backward, before);
}

// ==== unshard and reshard ============================================================================

void UnitLifecycle::unshard(FsdpUnit& unit) {
  if (unit.state == UnitState::unsharded) return;
  if (unit.state == UnitState::sharded && owns_full(unit)) {
    tasks_.overlap->acquire_full(unit, rank_, /*prefetch=*/false);
    gather(unit);
  }
  if (owns_full(unit)) tasks_.forward->wait_for_unshard(rank_.device, unit.gathered);
  tasks_.flat_parameter->point_views(unit.layout, unit.full, &Parameter::value);
  unit.state = UnitState::unsharded;
}

bool UnitLifecycle::prefetch(FsdpUnit& unit) {
  if (unit.state != UnitState::sharded) return true;
  if (owns_full(unit)) {
    if (!tasks_.overlap->acquire_full(unit, rank_, /*prefetch=*/true)) return false;
    gather(unit);
  }
  unit.state = UnitState::gathering;
  return true;
}

void UnitLifecycle::reshard(FsdpUnit& unit) {
  if (unit.state == UnitState::sharded) return;
  if (owns_full(unit)) tasks_.overlap->release_full(unit, rank_);
  unit.state = UnitState::sharded;
}

void UnitLifecycle::prefetch_after(PassPoint point, FsdpUnit& unit) {
  FsdpUnit* next = tasks_.overlap->after(point, unit, rank_);
  if (!next) return;
  const ActivityScope activity(rank_, 6, "OverlapTask::after", *tasks_.overlap, unit.index, IssuedTo::enclosing);
  prefetch(*next);
}

void UnitLifecycle::gather(FsdpUnit& unit) {
  // Gathering from the moment the gather is issued: its collective's events (observed_communicator.cpp) carry the
  // state, which the dashboard's FlatParameter map frames.
  unit.state = UnitState::gathering;
  Device& device = rank_.device;
  const Stream stream = device.stream(Lane::all_gather);
  // A prefetch runs inside another unit's hook: the gather's ops carry the unit they gather.
  OpLabels labels = device.labels();
  labels.unit = unit.index;
  const LabelScope scope(device, std::move(labels));
  std::vector<Tensor> staging;  // the layers' temporaries, released once the gather is done
  if (unit.replica.defined()) {
    // Replicated strategies hold the whole f32 parameters already: only the cast to param_dtype.
    cast(stream, unit.replica, unit.full);
    device.record(unit.gathered, Lane::all_gather);
  } else {
    Tensor shard = shard_on_device(unit, "flat_param_shard_device");  // CPU offload: a copy
    if (!shard.overlaps(unit.master)) staging.push_back(shard);
    if (shard.dtype() != unit.full.dtype()) {
      // Mixed precision: gather in param_dtype, half the bytes of the f32 master.
      const Tensor low = Tensor::empty(device, shard.shape(), unit.full.dtype(), MemTag::comm_buffer,
                                       unit.name + ".shard_" + std::string(dtype_name(unit.full.dtype())),
                                       Lane::all_gather);
      cast(stream, shard, low);
      staging.push_back(low);
      shard = low;
    }
    tasks_.forward->all_gather(device, rank_.shard_group, shard, unit.full, unit.gathered);
  }
  for (Tensor& t : staging) tasks_.overlap->release_staging(std::move(t), unit.gathered, rank_);
}

Tensor UnitLifecycle::shard_on_device(const FsdpUnit& unit, const std::string& purpose) {
  if (!offloaded(unit)) return unit.master;
  const Tensor copy = Tensor::empty(rank_.device, unit.master.shape(), DType::f32, MemTag::comm_buffer,
                                    unit.name + "." + purpose, Lane::memcpy);
  tasks_.cpu_offload->copy_shard_to_device(rank_.device, unit.master, copy);
  return copy;
}

// ==== the gradient ===================================================================================

void UnitLifecycle::reduce_gradient(FsdpUnit& unit) {
  Device& device = rank_.device;
  const Stream stream = device.stream(Lane::reduce_scatter);
  Tensor grads = unit.grad_full;
  std::vector<Tensor> staging;       // the layers' temporaries, released once the reduction is done
  Lane done = Lane::reduce_scatter;  // the stream whose work completes the reduced gradient
  const DType reduce_dtype = rank_.options.reduce_dtype;
  // The layers below read the gradient on the reduce-scatter stream before any task does.
  const bool layer_reads_first = grads.dtype() != reduce_dtype || unit.grad_replica.defined();
  if (layer_reads_first) rank_.device.wait_stream(Lane::reduce_scatter, Lane::compute);
  if (grads.dtype() != reduce_dtype) {
    // Mixed precision's reduce_dtype: widen the bf16 gradients to f32 before summing W of them.
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
    // no_shard and zero1: every rank keeps the whole gradient, averaged over all W ranks (DDP).
    if (rank_.world.world() > 1) rank_.world.all_reduce(stream, grads, ReduceOp::avg);
    if (!grads.overlaps(unit.grad_replica)) cast(stream, grads, unit.grad_replica);
  } else {
    // Averaged over the S ranks of the shard group (task 4), then over the W / S replicas of this shard
    // (task 8, hybrid): the mean over all W ranks either way.
    const Tensor shard = offloaded(unit)
                             ? Tensor::empty(device, unit.grad_shard.shape(), DType::f32, MemTag::comm_buffer,
                                             unit.name + ".flat_grad_shard_device", Lane::reduce_scatter)
                             : unit.grad_shard;
    if (!shard.overlaps(unit.grad_shard)) staging.push_back(shard);
    Tensor out = shard;
    if (reduce_dtype != shard.dtype()) {
      out = Tensor::empty(device, shard.shape(), reduce_dtype, MemTag::comm_buffer,
                          unit.name + ".grad_shard_" + std::string(dtype_name(reduce_dtype)), Lane::reduce_scatter);
      staging.push_back(out);
    }
    tasks_.backward->reduce_scatter(device, rank_.shard_group, grads, out);
    if (rank_.replica_group.world() > 1) {
      const ActivityScope activity(rank_, 8, "HybridShardTask::all_reduce_replicas", *tasks_.hybrid_shard, unit.index,
                                   IssuedTo::enclosing);
      tasks_.hybrid_shard->all_reduce_replicas(device, rank_.replica_group, out);
    }
    if (!out.overlaps(shard)) cast(stream, out, shard);
    if (offloaded(unit)) {
      tasks_.cpu_offload->copy_grad_to_host(device, shard, unit.grad_shard);
      done = Lane::memcpy;
    }
  }
  device.record(unit.reduced, done);
  rank_.schedule.reduction_order.push_back(&unit);
  for (Tensor& t : staging) tasks_.overlap->release_staging(std::move(t), unit.reduced, rank_);
  tasks_.overlap->release_grad(unit, rank_);
}

// ==== the optimizer ==================================================================================

void UnitLifecycle::schedule_updates(Optimizer& optimizer, std::span<FsdpUnit* const> units,
                                     std::span<FsdpUnit* const> reduced, FsdpUnit* gather_next) {
  // Task 5 makes one target per unit, in the units' order, and units[i] is the unit of index i (pre-order):
  // target i updates the unit of index i.
  std::vector<std::size_t> order;
  std::vector<bool> placed(units.size(), false);
  const auto place = [&](const FsdpUnit* unit) {
    const auto i = static_cast<std::size_t>(unit->index);
    if (placed[i] || unit == gather_next) return;
    order.push_back(i);
    placed[i] = true;
  };
  for (const FsdpUnit* unit : reduced) place(unit);
  for (const FsdpUnit* unit : units) place(unit);  // none reduced this step: updated last, waiting for nothing new
  Device& device = rank_.device;
  if (order.size() + (gather_next ? 1 : 0) != optimizer.targets().size()) {
    // Not one target per unit (task 5's checks say so): every reduction before the first update.
    for (const FsdpUnit* unit : units)
      if (unit->reduced.recorded()) device.wait(Lane::compute, unit->reduced);
    return;
  }
  if (gather_next) {
    // Its update goes where the others' updates before it are half of theirs by size: the first half
    // runs beside its reduction, the second beside its gather, which moves as many bytes.
    std::int64_t total = 0, before = 0;
    for (const std::size_t i : order) total += units[i]->master.numel();
    auto at = order.begin();
    while (at != order.end() && 2 * before < total) before += units[*at++]->master.numel();
    order.insert(at, static_cast<std::size_t>(gather_next->index));
  }
  Optimizer::UpdateHooks hooks;
  hooks.before = [units, &device](std::size_t i) {
    if (units[i]->reduced.recorded()) device.wait(Lane::compute, units[i]->reduced);
  };
  if (gather_next)
    hooks.after = [this, units, gather_next](std::size_t i) {
      if (units[i] != gather_next) return;
      const ActivityScope activity(rank_,
                                   CodeSite{6,
                                            "UnitLifecycle::optimizer_step: the next step's first unit, "
                                            "gathered beside the other updates (engine/fsdp/unit_lifecycle.cpp)"});
      rank_.device.wait_stream(Lane::all_gather, Lane::compute);  // the gather reads the shard this update wrote
      // Ordered after all compute so far, the gather may take the memory the root's last step left parked
      // (its last user was the embedding's backward), instead of a second root-sized block.
      rank_.schedule.parked.release_behind(Lane::all_gather, Lane::compute);
      prefetch(*gather_next);
    };
  optimizer.order_next_step(std::move(order), std::move(hooks));
}

FsdpUnit* UnitLifecycle::first_of_next_forward() const {
  const OverlapState& s = rank_.schedule;
  // Replicated parameters are not gathered but cast from the replica, which ZeRO's all_gather_updates
  // writes after the step; the forward order is task 6's record (empty if it keeps none).
  if (!rank_.options.prefetch.next_step || parameters_replicated(rank_.options.strategy) || s.forward_order.empty())
    return nullptr;
  return s.forward_order.front();
}

std::unique_ptr<Optimizer> UnitLifecycle::make_optimizer(std::span<FsdpUnit* const> units,
                                                         const OptimizerSpec& spec) const {
  std::vector<UnitShards> shards;
  for (const FsdpUnit* unit : units) shards.push_back({unit->name, unit->master, unit->grad_shard, unit->replica});
  return tasks_.optimizer->make(shards, spec);
}

// [Note: per-unit optimizer steps]
// The optimizer reads each unit's gradient shard, so each update must wait for that unit's reduction.
// Waiting for all of them before the first update (as SYNC does, one wait per reduction) leaves the
// last reductions with no compute beside them: the backward's last op is the root's (the embedding,
// whose weight is tied to the LM head), so the root's reduce-scatter, the largest, starts when compute
// is done and the whole step waits for it. Under ASYNC each update waits for its own unit's reduction
// only, and the updates go in the order the reductions were issued: the blocks' gradients, reduced
// during the backward, are updated while the link still reduces the root's.
//
// The next step begins the same way: its first op needs the root gathered, and nothing runs beside that
// gather. With the `next-step` prefetch (in the default), another step following, the root's update
// moves to the middle of the others, and its gather for the next step is issued right after it, beside
// the second half of the updates. The next forward finds the root gathering (or gathered) and waits
// for it like any prefetched unit.
//   compute  ... emb bwd | upd h.11 .. h.6 | upd root | upd h.5 .. h.0 || next step: emb fwd ...
//   link     ... rs h.0  | rs root ........|          | ag root .......||
// Same updates, same numbers; only where the compute stream waits, and when the root is gathered, move.

void UnitLifecycle::optimizer_step(Optimizer& optimizer, std::span<FsdpUnit* const> units, NextForward next) {
  const ActivityScope activity(rank_, 5, "ShardedOptimizerTask::step", *tasks_.optimizer);
  Device& device = rank_.device;
  const std::vector<FsdpUnit*> reduced = std::exchange(rank_.schedule.reduction_order, {});
  if (rank_.options.offload) {
    // CPU offload: the CPU steps on the host shards, once the copies of the gradients have landed.
    for (const FsdpUnit* unit : units)
      if (unit->reduced.recorded()) tasks_.cpu_offload->wait_for_grad_on_host(device, unit->reduced);
    tasks_.optimizer->step(optimizer, device.stream(Lane::host));
  } else {
    if (rank_.async())
      schedule_updates(optimizer, units, reduced, next == NextForward::follows ? first_of_next_forward() : nullptr);
    tasks_.optimizer->step(optimizer, device.stream(Lane::compute));
  }
  const ShardingStrategy strategy = rank_.options.strategy;
  if ((strategy == ShardingStrategy::zero1 || strategy == ShardingStrategy::zero2) && rank_.shard_group.world() > 1) {
    // Its gathers are this method's, and the optimizer step's event below counts them.
    const ActivityScope gathering(rank_, 5, "ShardedOptimizerTask::all_gather_updates", *tasks_.optimizer, -1,
                                  IssuedTo::enclosing);
    std::vector<UnitShards> shards;
    for (const FsdpUnit* unit : units) shards.push_back({unit->name, unit->master, unit->grad_shard, unit->replica});
    tasks_.optimizer->all_gather_updates(device, rank_.shard_group, shards);
  }
  report_optimizer_step(rank_, units, optimizer.name());
}

}  // namespace fsdplab
