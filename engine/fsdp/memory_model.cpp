#include "engine/fsdp/memory_model.hpp"

#include <algorithm>
#include <numeric>

#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/fsdp/unit_lifecycle.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {

std::vector<UnitSize> plan_unit_sizes(Module& model, std::span<const std::string> unit_kinds,
                                      const FsdpOptions& options, int world) {
  validate_fsdp_options(options, world);
  const int shards = shard_group_size(options, world);
  const std::vector<UnitPlan> plans = reference_integration().plan_units(model, unit_kinds);
  std::vector<UnitSize> sizes;
  for (const UnitPlan& plan : plans) {
    const bool root = plan.module->parent() == nullptr;
    const FlatParamLayout layout = reference_flat_parameter().plan(plan.params, shards, options.align);
    const bool nested = plan.parent >= 0 && !sizes[static_cast<std::size_t>(plan.parent)].root;
    sizes.push_back({layout.padded_numel, layout.shard_numel(), root, layout.padded_numel, nested});
  }
  // Plans are in pre-order, so walking them backwards finishes every unit's chain before its parent's.
  for (std::size_t u = plans.size(); u-- > 0;) {
    const int parent = plans[u].parent;
    if (sizes[u].nested) {
      UnitSize& outer = sizes[static_cast<std::size_t>(parent)];
      outer.chain_numel = std::max(outer.chain_numel, outer.padded_numel + sizes[u].chain_numel);
    }
  }
  return sizes;
}

std::int64_t embedding_rows_staging(int world, std::int64_t tokens, std::int64_t dim, std::int64_t position_numel,
                                    DType param_dtype) {
  const auto p = static_cast<std::int64_t>(dtype_size(param_dtype));
  return 4 * world * tokens + p * world * tokens * dim + p * position_numel;
}

namespace {

// A unit's staging buffers (comm_buffer). Its gather's: the offloaded shard's f32 device copy and the shard's
// bf16 cast.
std::int64_t gather_staging(const UnitSize& u, const FsdpOptions& options) {
  const std::int64_t offload_copy = options.offload ? 4 * u.shard_numel : 0;
  const bool cast = !parameters_replicated(options.strategy) && options.param_dtype != DType::f32;
  return offload_copy + (cast ? static_cast<std::int64_t>(dtype_size(options.param_dtype)) * u.shard_numel : 0);
}

// Whether `u` is reduced in parts: the root under --embedding-grad rows.
bool reduced_in_parts(const UnitSize& u, const FsdpOptions& options) {
  return u.root && options.embedding_grad == EmbeddingGradient::rows;
}

// Its reduction's: the gradients widened to the reduce dtype or the reduction's bf16 output, beside the
// offloaded shard's f32 device copy. A unit reduced in `parts`: each part's slice of every chunk copied side by
// side (and its bf16 output), what one part holds.
std::int64_t reduce_staging(const UnitSize& u, const FsdpOptions& options, int parts) {
  const std::int64_t r = static_cast<std::int64_t>(dtype_size(options.reduce_dtype));
  if (reduced_in_parts(u, options)) {
    const std::int64_t part = (u.shard_numel + parts - 1) / parts;
    return r * (u.padded_numel / u.shard_numel) * part + (options.reduce_dtype != DType::f32 ? r * part : 0);
  }
  std::int64_t bytes = options.offload ? 4 * u.shard_numel : 0;
  if (gradients_replicated(options.strategy)) return bytes;
  if (options.param_dtype != options.reduce_dtype) bytes += r * u.padded_numel;
  if (options.reduce_dtype != DType::f32) bytes += r * u.shard_numel;
  return bytes;
}

// The units' sizes, summed and compared once for both schedules.
struct UnitTotals {
  std::int64_t all = 0;            // ΣP
  std::int64_t shards = 0;         // ΣZ
  std::int64_t root = 0;           // R
  std::int64_t others = 0;         // ΣP of the units other than the root
  std::int64_t largest_unit = 0;   // the largest unit other than the root
  std::int64_t largest_chain = 0;  // Bmax: the largest chain of a unit not nested in another
  bool nested = false;             // some unit is nested in another
};

UnitTotals totals_of(const FsdpMemoryInput& in) {
  check(!in.units.empty(), "memory model: no FSDP units");
  UnitTotals t;
  for (const UnitSize& u : in.units) {
    t.all += u.padded_numel;
    t.shards += u.shard_numel;
    if (u.root) {
      t.root = u.padded_numel;
      continue;
    }
    t.others += u.padded_numel;
    t.largest_unit = std::max(t.largest_unit, u.padded_numel);
    if (!u.nested) t.largest_chain = std::max(t.largest_chain, u.chain_numel);
    t.nested = t.nested || u.nested;
  }
  return t;
}

// What a schedule holds at its peak, in elements (bytes for staging): the rest of each tag follows from the
// strategy alone.
struct ScheduleHolds {
  std::int64_t gathered = 0;    // gathered parameters (param_full, beside a replica)
  std::int64_t unit_grads = 0;  // unsharded gradients (grad_full, beside a replica)
  std::int64_t staging = 0;     // comm_buffer
};

TagBytes tags_of(const FsdpMemoryInput& in, const UnitTotals& t, const ScheduleHolds& holds) {
  const ShardingStrategy strategy = in.options.strategy;
  const std::int64_t p = static_cast<std::int64_t>(dtype_size(in.options.param_dtype));
  const bool sharded_group = shard_group_size(in.options, in.world) > 1;
  const bool f32 = in.options.param_dtype == DType::f32;
  // The replicas exist on every rank; tagged as the shards they are when the group is one rank.
  const bool param_replica_full =
      parameters_replicated(strategy) && strategy != ShardingStrategy::no_shard && sharded_group;
  const bool grad_replica_full = strategy == ShardingStrategy::zero1 && sharded_group;

  TagBytes bytes{};
  const auto at = [&](MemTag tag) -> std::int64_t& { return bytes[static_cast<std::size_t>(tag)]; };
  // CPU offload keeps the f32 shards and the optimizer state in host memory (Device::host_ledger).
  const std::int64_t on_device = in.options.offload ? 0 : 1;
  at(MemTag::param_shard) = param_replica_full ? 0 : 4 * t.shards * on_device;
  at(MemTag::param_full) =
      (parameters_replicated(strategy) && f32 ? 0 : p * holds.gathered) + (param_replica_full ? 4 * t.all : 0);
  at(MemTag::grad_shard) = grad_replica_full ? 0 : 4 * t.shards * on_device;
  at(MemTag::grad_full) =
      (gradients_replicated(strategy) && f32 ? 0 : p * holds.unit_grads) + (grad_replica_full ? 4 * t.all : 0);
  at(MemTag::optim_state) = 4 * in.optimizer_states * t.shards * on_device;
  at(MemTag::comm_buffer) = holds.staging;
  at(MemTag::activation) = in.model.activation;
  at(MemTag::workspace) = 4;  // the trainer's loss mean over ranks
  return bytes;
}

void check_input(const FsdpMemoryInput& in) {
  validate_fsdp_options(in.options, in.world);
  check(in.optimizer_states >= 0, "memory model: ", in.optimizer_states, " optimizer states; expected 0, 1 or 2");
}

}  // namespace

TagBytes fsdp_memory(const FsdpMemoryInput& in) {
  check_input(in);
  const UnitTotals t = totals_of(in);
  ScheduleHolds holds;
  holds.gathered = reshards_after_forward(in.options.strategy) ? t.root + t.largest_chain : t.all;
  holds.unit_grads = t.root + t.largest_chain;
  if (in.options.buffers == UnshardBuffers::pool) {
    // The pool's two buffers, each as large as the largest unit, are allocated once and held through the run.
    holds.gathered = t.root + 2 * t.largest_unit;
    holds.unit_grads = t.root + 2 * t.largest_unit;
  }
  if (in.micro_batches > 1)
    holds.unit_grads = t.all;  // each unit's gradient kept until the last micro-batch's reduction
  const int parts = root_reduction_parts(in.units.size());
  for (const UnitSize& u : in.units)
    holds.staging = std::max({holds.staging, gather_staging(u, in.options), reduce_staging(u, in.options, parts)});
  holds.staging = std::max(holds.staging, in.embedding_rows);
  return tags_of(in, t, holds);
}

TagBytes fsdp_memory_bound(const FsdpMemoryInput& in) {
  if (in.options.mode == OverlapMode::sync) return fsdp_memory(in);
  check_input(in);
  const FsdpOptions& o = in.options;
  const UnitTotals t = totals_of(in);
  // The host runs ahead of the device through a step (it waits for the device only at the step's end, not between
  // the micro-batches of gradient accumulation), so it sees no use end before it issues the next: every buffer of
  // the step may still be held when the next one is allocated. The root is gathered once a micro-batch, and once
  // more by the next step's prefetch while its old buffer may still be parked.
  const std::int64_t micro_batches = in.micro_batches;
  const std::int64_t roots = t.root * (micro_batches + (o.prefetch.next_step ? 1 : 0));
  ScheduleHolds holds;
  if (o.buffers == UnshardBuffers::pool) {
    holds.gathered = roots + 2 * t.largest_unit;  // the pool's two buffers
  } else if (!reshards_after_forward(o.strategy)) {
    // Each unit gathered once a micro-batch, kept from its forward to its backward.
    holds.gathered = micro_batches * t.others + roots;
  } else if (o.max_inflight > 0) {
    // The rate limiter counts the resharding units, in use or parked; past the limit, only a unit a chain of
    // nested units holds in use.
    holds.gathered = roots + std::min(2 * micro_batches * t.others,
                                      o.max_inflight * t.largest_unit + (t.nested ? t.largest_chain : 0));
  } else {
    // No limit: a unit's forward copy may still be parked when its backward gathers it again, and both when the
    // next micro-batch's forward does.
    holds.gathered = roots + 2 * micro_batches * t.others;
  }
  // A unit's gradient is parked until its reduction is done, and compute may run ahead of every reduction: each
  // unit's gradient may be held at once, and each gather's and reduction's staging.
  holds.unit_grads = o.buffers == UnshardBuffers::pool ? t.root + 2 * t.largest_unit : t.all;
  // Gathers a micro-batch: a unit's in its forward, and again in its backward where it reshards after forward.
  const int gathers_per_micro_batch = reshards_after_forward(o.strategy) ? 2 : 1;
  for (const UnitSize& u : in.units) {
    const int gathers =
        (u.root ? 1 : gathers_per_micro_batch) * in.micro_batches + (u.root && o.prefetch.next_step ? 1 : 0);
    const int parts = reduced_in_parts(u, o) ? root_reduction_parts(in.units.size()) : 1;
    holds.staging += gathers * gather_staging(u, o) + parts * reduce_staging(u, o, parts);
  }
  holds.staging += in.embedding_rows;
  TagBytes bytes = tags_of(in, t, holds);
  // Under accumulation the next micro-batch's inputs arrive while the last one's may still be held.
  if (micro_batches > 1) bytes[static_cast<std::size_t>(MemTag::activation)] += in.micro_batch_inputs;
  return bytes;
}

TagBytes baseline_memory(Module& model, int optimizer_states, const ModelMemory& model_memory, DType compute) {
  const std::vector<Parameter*> params = model.parameters();
  const std::int64_t numel = std::accumulate(params.begin(), params.end(), std::int64_t{0},
                                             [](std::int64_t n, const Parameter* q) { return n + q->numel(); });
  TagBytes bytes{};
  bytes[static_cast<std::size_t>(MemTag::param_shard)] = 4 * numel;
  bytes[static_cast<std::size_t>(MemTag::grad_shard)] = 4 * numel;
  bytes[static_cast<std::size_t>(MemTag::optim_state)] = 4 * optimizer_states * numel;
  if (compute != DType::f32) {  // mixed precision's copies (baseline_parameters.hpp)
    const auto copy_bytes = static_cast<std::int64_t>(dtype_size(compute)) * numel;
    bytes[static_cast<std::size_t>(MemTag::param_full)] = copy_bytes;
    bytes[static_cast<std::size_t>(MemTag::grad_full)] = copy_bytes;
  }
  bytes[static_cast<std::size_t>(MemTag::activation)] = model_memory.activation;
  return bytes;
}

}  // namespace fsdplab
