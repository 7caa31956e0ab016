#include "engine/fsdp/unit_lifecycle.hpp"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "engine/fsdp/fsdp_events.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/tensor/embedding.hpp"

namespace fsdplab {
namespace {

// False for replicated strategies in f32, whose `full` is the replica itself: nothing to gather or free.
bool owns_full(const FsdpUnit& unit) { return !unit.full.overlaps(unit.replica); }

// True for a unit whose f32 master lives in host memory (CPU offload).
bool offloaded(const FsdpUnit& unit) { return unit.master.storage().stream() == Lane::host; }

// What task 5 is handed of each unit: its name, master shard, gradient shard and replica.
std::vector<UnitShards> unit_shards(std::span<FsdpUnit* const> units) {
  std::vector<UnitShards> shards;
  for (const FsdpUnit* unit : units) shards.push_back({unit->name, unit->master, unit->grad_shard, unit->replica});
  return shards;
}

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
  if (unit.module->parent() != nullptr) reduce_root_part();
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
  if (!unit.grad_accumulated && !end_root_reduction(unit) && !held_for_the_rows(unit)) reduce_gradient(unit);
  report_unit_event(rank_, unit, FsdpEventKind::post_backward, before);
}

// ==== unshard and reshard ============================================================================

void UnitLifecycle::unshard(FsdpUnit& unit) {
  if (unit.state == UnitState::unsharded) return;
  if (unit.state == UnitState::sharded && owns_full(unit)) {
    claim_pool_slot(unit, /*prefetch=*/false);
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
    if (!claim_pool_slot(unit, /*prefetch=*/true)) return false;
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

// [Note: one unit at a time in a pool slot]
// The two-buffer pool (--buffers pool) holds the gathered parameters and gradients of at most two units at once,
// and the gather into a slot waits only for the free event of the slot's last unit, which task 6 records when
// that unit is resharded. While another unit of the slot is gathered and not resharded, no free event stands for
// it: a gather then would overwrite parameters the compute stream may still read. FullyShardedModel::use_buffer_pool
// deals the units out even, odd, even, .. in the forward's order, so that each gather finds its slot free where the
// backward runs the units in the forward's order reversed; but not everywhere: Llama's MLP runs gate_proj, up_proj,
// down_proj forward and down_proj, gate_proj, up_proj backward, so under `--wrap linear` (a unit each) down_proj and
// gate_proj, both even, come one after the other, and the backward prefetch, which guesses the forward's order
// reversed, gathers up_proj while down_proj runs and o_proj while up_proj waits to run. So before each gather of a
// pooled unit the lifecycle picks its slot by what the slots hold now:
//   - its own slot when no other unit holds it, else the other slot when none does (the unit moves there, and its
//     views with it; both slots are as large as the largest pooled unit);
//   - with both held, a prefetch is not issued (the unit is gathered when its turn comes, a prefetch declined as by
//     the rate limiter), and a gather that compute waits for takes a slot from a prefetch not used yet, which is
//     resharded and gathered again when its turn comes. A unit in use is never taken from: pooled units are never
//     nested (use_buffer_pool refuses that), and each is resharded after its forward and after its backward.
bool UnitLifecycle::claim_pool_slot(FsdpUnit& unit, bool prefetch) {
  if (unit.pool_slot < 0) return true;
  std::array<FsdpUnit*, 2> holder{nullptr, nullptr};  // the unit gathered, and not resharded, in each slot
  for (FsdpUnit* other : rank_.schedule.units)
    if (other != &unit && other->pool_slot >= 0 && other->state != UnitState::sharded)
      holder[static_cast<std::size_t>(other->pool_slot)] = other;
  std::size_t slot = static_cast<std::size_t>(unit.pool_slot);
  if (holder[slot] && !holder[1 - slot]) slot = 1 - slot;
  if (FsdpUnit* other = holder[slot]) {
    if (prefetch) return false;
    // Both slots held: take the one whose unit is a prefetch not used yet.
    if (other->state != UnitState::gathering) {
      slot = 1 - slot;
      other = holder[slot];
    }
    check(other->state == UnitState::gathering, "--buffers pool: unit '", unit.name, "' needs a pool buffer while '",
          holder[0]->name, "' and '", holder[1]->name,
          "' are unsharded in the two; the pool takes units that run one after another");
    reshard(*other);
  }
  put_in_pool_slot(rank_.schedule, unit, static_cast<int>(slot));
  return true;
}

void put_in_pool_slot(OverlapState& s, FsdpUnit& unit, int slot) {
  if (unit.pool_slot == slot) return;
  const auto i = static_cast<std::size_t>(slot);
  unit.pool_slot = slot;
  unit.full = s.param_pool[i].view(0, {unit.layout.padded_numel}).set_name(unit.name + ".flat_param_full");
  unit.grad_full = s.grad_pool[i].view(0, {unit.layout.padded_numel}).set_name(unit.name + ".flat_grad_full");
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
    reduce_scatter_mean(unit, grads, shard, "grad_shard", staging);
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

// ==== the embedding's gradient as rows =================================================================

// [Note: the embedding's gradient as rows]
// GPT-2's root unit holds wte, which the LM head shares (a third of gpt2 124M's parameters), with wpe and
// ln_f. Its gradient is complete only after the backward's last op, the embedding's, so its reduce-scatter
// starts when compute is done and the step waits for it, then for the root's update and its gather for
// the next step ([Note: per-unit optimizer steps]); on a slow link that is where the exposed time is.
// Yet the embedding adds only B·T rows into a table of V rows (gpt2's bench: 4 × 1024 of 50,304).
// `--embedding-grad rows` splits the root's gradient by where it comes from:
//   - the LM head's and ln_f's parts are complete when the backward enters the first inner unit. From there
//     the root is reduced in parts, one issued in each inner unit's pre-backward (after its prefetch), each
//     part the same slice of every rank's chunk: one root-sized reduce-scatter on the link would hold back the
//     next unit's gather behind it, where a part fits beside each unit's own collectives. The root's
//     parameters are freed at the first part (the embedding's backward reads none).
//   - the model hands the embedding's gradient (the ids and dx [B, T, C]) to a sink instead of adding it into
//     the tables (InputEmbeddingGradientSink, model.hpp): the ids and rows of all W ranks are all-gathered,
//     W·B·T·C values where the table's reduction moves V·C, and each rank adds the sums that fall in its shard,
//     averaged over the W ranks, into its reduced gradient shard: wte's with the embedding's own backward
//     into that slice of the table (embedding_backward_slice), wpe's as the bias gradient it is. The sums run
//     on the compute stream, which has nothing else to do until the root's update.
//   - under ASYNC, the reduce-scatter of the unit the backward ends with goes after the rows' gathers, not
//     before: the root's update waits for the rows, its gather for the next step waits for the update (which
//     comes first of the updates, [Note: per-unit optimizer steps]), and the next step waits for that gather,
//     where the unit's own reduction is needed only by its own update. It runs beside the sums and the update.
//     compute  lm_head, ln_f | h.11      | h.10      | ... h.0 | (the sink)      | sums, upd root | upd h.11 ...
//     link                   | rs root 0 | rs root 1 | ...     | ag ids, ag rows | rs h.0 ...     | ag root ...
//                            | rs h.11, ag h.10 ...
// The gradient is the same sum, rounded differently: a token's rows are summed over all ranks in f32 and
// scaled by 1/W (wpe's sums rounded to the param dtype first), where `table` rounds each rank's table to the
// param dtype and averages in the reduce dtype.
// What crosses the link grows with W (W - 1 of W·B·T·C values a rank against the table's (W - 1)/W·V·C), so
// `rows` pays while W·B·T is below V (gpt2's bench: up to W = 12), and where the root is a large share of the
// model. Llama's root (embed_tokens, the final norm, the untied lm_head; no position table) is 4 % of 7B, its
// reduction hidden behind the layers' updates: there the rows only add their gathers (docs/PERFORMANCE.md).

void UnitLifecycle::reduce_root_part() {
  if (rank_.options.embedding_grad != EmbeddingGradient::rows || !rank_.reduce_gradients) return;
  const std::span<FsdpUnit* const> units = rank_.schedule.units;
  FsdpUnit& root = *units.front();
  if (root.module->parent() != nullptr) return;  // no root unit
  RootReduction& r = root_reduction_;
  if (!r.root) {
    if (root.state == UnitState::sharded) return;  // not in this backward
    r = {&root, root_reduction_parts(units.size()), 0, {}};
    reshard(root);
  }
  if (r.issued == r.parts) return;
  Device& device = rank_.device;
  OpLabels labels = device.labels();
  labels.unit = root.index;
  const LabelScope scope(device, std::move(labels));
  const ActivityScope activity(rank_, 4, "BackwardTask::reduce_scatter", *tasks_.backward, root.index,
                               IssuedTo::enclosing);
  const std::int64_t shard = root.layout.shard_numel();
  const std::int64_t begin = shard * r.issued / r.parts, end = shard * (r.issued + 1) / r.parts;
  ++r.issued;
  if (end > begin) reduce_part(root, begin, end - begin);
}

void UnitLifecycle::reduce_part(FsdpUnit& unit, std::int64_t begin, std::int64_t count) {
  Device& device = rank_.device;
  const Lane lane = Lane::reduce_scatter;
  const Stream stream = device.stream(lane);
  const DType reduce_dtype = rank_.options.reduce_dtype;
  const int shards = rank_.shard_group.world();
  const std::int64_t shard = unit.layout.shard_numel();
  // Elements [begin, begin + count) of every rank's chunk side by side, as the reduce-scatter takes them
  // (widened to the reduce dtype on the way).
  rank_.device.wait_stream(lane, Lane::compute);
  const Tensor parts =
      Tensor::empty(device, {shards * count}, reduce_dtype, MemTag::comm_buffer, unit.name + ".grad_part", lane);
  for (int r = 0; r < shards; ++r)
    cast(stream, unit.grad_full.view(r * shard + begin, {count}), parts.view(r * count, {count}));
  std::vector<Tensor> staging{parts};
  reduce_scatter_mean(unit, parts, unit.grad_shard.view(begin, {count}), "grad_part", staging);
  Event done("fsdp.grad_part_reduced");
  device.record(done, lane);
  if (!rank_.async()) device.wait(Lane::compute, done);  // SYNC: every collective blocks compute
  for (Tensor& t : staging) tasks_.overlap->release_staging(std::move(t), done, rank_);
}

bool UnitLifecycle::held_for_the_rows(FsdpUnit& unit) {
  RootReduction& r = root_reduction_;
  if (!rank_.async() || !r.root || r.issued < r.parts || &unit == r.root) return false;
  r.held.push_back(&unit);
  return true;
}

void UnitLifecycle::reduce_held_units() {
  Device& device = rank_.device;
  for (FsdpUnit* unit : std::exchange(root_reduction_.held, {})) {
    OpLabels labels = device.labels();  // the root's, whose backward issues it
    labels.unit = unit->index;
    const LabelScope scope(device, std::move(labels));
    const ActivityScope activity(rank_, 4, "BackwardTask::reduce_scatter", *tasks_.backward, unit->index);
    reduce_gradient(*unit);
  }
}

bool UnitLifecycle::end_root_reduction(FsdpUnit& unit) {
  if (&unit != root_reduction_.root) return false;
  reduce_held_units();  // add_embedding_rows issued them, unless this backward never reached the embedding
  rank_.schedule.reduction_order.push_back(&unit);
  root_reduction_ = {};
  return true;
}

bool UnitLifecycle::add_embedding_rows(const InputEmbeddingGradient& grad) {
  if (!root_reduction_.root) return false;
  // Parts not issued yet (a backward through fewer inner units than the forward) go now, before the rows.
  for (int left = root_reduction_.parts - root_reduction_.issued; left > 0; --left) reduce_root_part();
  FsdpUnit& root = *root_reduction_.root;
  Device& device = rank_.device;
  const ActivityScope activity(rank_,
                               CodeSite{4,
                                        "UnitLifecycle::add_embedding_rows: the embedding's gradient as rows "
                                        "(engine/fsdp/unit_lifecycle.cpp)"},
                               root.index);
  // Every rank's rows, so the replicas of a shard (hybrid) add the same rows: the mean is over all W ranks.
  Communicator& ranks = rank_.world;
  const std::int64_t W = ranks.world(), B = grad.dx.dim(0), T = grad.dx.dim(1), C = grad.dx.dim(2);
  const DType dtype = grad.dx.dtype();
  const Lane lane = Lane::reduce_scatter;
  const Stream stream = device.stream(lane);
  const auto temporary = [&](std::int64_t numel, DType type, const std::string& name, Lane user) {
    return Tensor::empty(device, {numel}, type, MemTag::comm_buffer, root.name + "." + name, user);
  };
  std::vector<Tensor> staging;
  device.wait_stream(lane, Lane::compute);  // the rows and ids, written by compute
  const Tensor ids = temporary(W * B * T, DType::i32, "embedding_ids", lane);
  const Tensor rows = temporary(W * B * T * C, dtype, "embedding_rows", lane);
  ranks.all_gather(stream, grad.ids.reshape({B * T}), ids);
  ranks.all_gather(stream, grad.dx.reshape({B * T * C}), rows);
  staging.insert(staging.end(), {ids, rows});
  Event gathered("fsdp.embedding_rows_gathered");
  device.record(gathered, lane);
  reduce_held_units();
  // The sums, on the compute stream.
  device.wait(Lane::compute, gathered);
  const Stream compute = device.stream(Lane::compute);
  const float mean = 1.0f / static_cast<float>(W);
  // The tables are the root's (FullyShardedModel's constructor refuses them elsewhere).
  const Parameter& token = grad.token_table;
  const Parameter* position = grad.position_table;  // GPT-2's wpe; none for Llama
  // wpe's rows 0 .. T-1, each the sum over every rank's batch: T·C values, which every rank sums.
  Tensor position_sums;
  if (position) {
    position_sums = temporary(position->numel(), dtype, "grad_rows_of_" + position->name, Lane::compute);
    staging.push_back(position_sums);
    fill(compute, position_sums, 0);
    bias_backward(compute, rows.reshape({W * B, T * C}), position_sums.view(0, {T * C}));
  }
  for (const ShardSlice& s : tasks_.flat_parameter->shard_slices(root.layout, rank_.shard_group.rank())) {
    const Tensor into = root.grad_shard.view(s.shard_offset, {s.count});
    if (s.param == &token)
      embedding_backward_slice(compute, rows.reshape({W * B * T, C}), ids, token.shape[0], s.param_begin, mean, into);
    if (position && s.param == position) add_scaled(compute, position_sums.view(s.param_begin, {s.count}), mean, into);
  }
  device.record(root.reduced, Lane::compute);
  for (Tensor& t : staging) tasks_.overlap->release_staging(std::move(t), root.reduced, rank_);
  tasks_.overlap->release_grad(root, rank_);  // SYNC: compute waits for the reduction here
  return true;
}

int root_reduction_parts(std::size_t units) { return std::max(1, static_cast<int>(units) - 1); }

void UnitLifecycle::reduce_scatter_mean(const FsdpUnit& unit, const Tensor& grads, const Tensor& shard,
                                        const std::string& name, std::vector<Tensor>& staging) {
  Device& device = rank_.device;
  const DType reduce_dtype = rank_.options.reduce_dtype;
  Tensor out = shard;
  if (reduce_dtype != shard.dtype()) {
    out = Tensor::empty(device, shard.shape(), reduce_dtype, MemTag::comm_buffer,
                        unit.name + "." + name + "_" + std::string(dtype_name(reduce_dtype)), Lane::reduce_scatter);
    staging.push_back(out);
  }
  tasks_.backward->reduce_scatter(device, rank_.shard_group, grads, out);
  if (rank_.replica_group.world() > 1) {
    const ActivityScope activity(rank_, 8, "HybridShardTask::all_reduce_replicas", *tasks_.hybrid_shard, unit.index,
                                 IssuedTo::enclosing);
    tasks_.hybrid_shard->all_reduce_replicas(device, rank_.replica_group, out);
  }
  if (!out.overlaps(shard)) cast(device.stream(Lane::reduce_scatter), out, shard);
}

// ==== the optimizer ==================================================================================

void UnitLifecycle::compute_waits_for_every_reduction(std::span<FsdpUnit* const> units) {
  for (const FsdpUnit* unit : units)
    if (unit->reduced.recorded()) rank_.device.wait(Lane::compute, unit->reduced);
}

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
    compute_waits_for_every_reduction(units);
    return;
  }
  if (gather_next) {
    // Its update goes where the others' updates before it are half of theirs by size: the first half
    // runs beside its reduction, the second beside its gather, which moves as many bytes. The root's
    // reduction under --embedding-grad rows ends on the compute stream ([Note: the embedding's gradient as
    // rows]): nothing of it is left on the link, and its update goes first.
    const bool reduced_by_compute =
        rank_.options.embedding_grad == EmbeddingGradient::rows && gather_next->module->parent() == nullptr;
    std::int64_t total = 0, before = 0;
    for (const std::size_t i : order) total += units[i]->master.numel();
    auto at = order.begin();
    while (!reduced_by_compute && at != order.end() && 2 * before < total) before += units[*at++]->master.numel();
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
  return tasks_.optimizer->make(unit_shards(units), spec);
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
// (With the embedding's gradient as rows, the root's update goes first: see that note.)
// Same updates, same numbers; only where the compute stream waits, and when the root is gathered, move.

Tensor UnitLifecycle::clip_grad_norm(std::span<FsdpUnit* const> units, double max_grad_norm, Lane lane) {
  // Inside optimizer_step's scope: the step's event counts the norm's all-reduce.
  const ActivityScope activity(rank_, 5, "ShardedOptimizerTask::clip_grad_norm", *tasks_.optimizer, -1,
                               IssuedTo::enclosing);
  Device& device = rank_.device;
  if (lane == Lane::compute) compute_waits_for_every_reduction(units);  // offload: the host lane has waited already
  const Tensor squared_norm = Tensor::empty(device, {1}, DType::f32, MemTag::workspace, "gradient squared norm", lane);
  tasks_.optimizer->clip_grad_norm(rank_.shard_group, unit_shards(units), max_grad_norm, squared_norm,
                                   device.stream(lane));
  return squared_norm;
}

Tensor UnitLifecycle::optimizer_step(Optimizer& optimizer, std::span<FsdpUnit* const> units, NextForward next,
                                     double max_grad_norm) {
  const ActivityScope activity(rank_, 5, "ShardedOptimizerTask::step", *tasks_.optimizer);
  Device& device = rank_.device;
  const std::vector<FsdpUnit*> reduced = std::exchange(rank_.schedule.reduction_order, {});
  Tensor squared_norm;
  if (rank_.options.offload) {
    // CPU offload: the CPU steps on the host shards, once the copies of the gradients have landed.
    for (const FsdpUnit* unit : units)
      if (unit->reduced.recorded()) tasks_.cpu_offload->wait_for_grad_on_host(device, unit->reduced);
    if (max_grad_norm > 0) squared_norm = clip_grad_norm(units, max_grad_norm, Lane::host);
    tasks_.optimizer->step(optimizer, device.stream(Lane::host));
  } else {
    // Clipping waits for every reduction, which leaves the per-unit waits below nothing to wait for.
    if (max_grad_norm > 0) squared_norm = clip_grad_norm(units, max_grad_norm, Lane::compute);
    if (rank_.async())
      schedule_updates(optimizer, units, reduced, next == NextForward::follows ? first_of_next_forward() : nullptr);
    tasks_.optimizer->step(optimizer, device.stream(Lane::compute));
  }
  const ShardingStrategy strategy = rank_.options.strategy;
  if ((strategy == ShardingStrategy::zero1 || strategy == ShardingStrategy::zero2) && rank_.shard_group.world() > 1) {
    // Its gathers are this method's, and the optimizer step's event below counts them.
    const ActivityScope gathering(rank_, 5, "ShardedOptimizerTask::all_gather_updates", *tasks_.optimizer, -1,
                                  IssuedTo::enclosing);
    tasks_.optimizer->all_gather_updates(device, rank_.shard_group, unit_shards(units));
  }
  report_optimizer_step(rank_, units, optimizer.name(), max_grad_norm);
  return squared_norm;
}

}  // namespace fsdplab
