#include "engine/fsdp/memory_model.hpp"

#include <algorithm>
#include <numeric>

#include "engine/fsdp/fsdp_tasks.hpp"
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

TagBytes fsdp_memory(const FsdpMemoryInput& in) {
  validate_fsdp_options(in.options, in.world);
  check(!in.units.empty(), "memory model: no FSDP units");
  check(in.optimizer_states >= 0, "memory model: ", in.optimizer_states, " optimizer states; expected 0, 1 or 2");
  const ShardingStrategy strategy = in.options.strategy;
  const std::int64_t p = static_cast<std::int64_t>(dtype_size(in.options.param_dtype));
  const std::int64_t r = static_cast<std::int64_t>(dtype_size(in.options.reduce_dtype));
  const bool sharded_group = shard_group_size(in.options, in.world) > 1;
  const bool f32 = in.options.param_dtype == DType::f32;

  std::int64_t all = 0, shards = 0, root = 0, largest_other = 0;
  for (const UnitSize& u : in.units) {
    all += u.padded_numel;
    shards += u.shard_numel;
    if (u.root) {
      root = u.padded_numel;
    } else if (!u.nested) {
      largest_other = std::max(largest_other, u.chain_numel);
    }
  }
  const std::int64_t in_flight = reshards_after_forward(strategy) ? root + largest_other : all;
  // The replicas exist on every rank; tagged as the shards they are when the group is one rank.
  const bool param_replica_full =
      parameters_replicated(strategy) && strategy != ShardingStrategy::no_shard && sharded_group;
  const bool grad_replica_full = strategy == ShardingStrategy::zero1 && sharded_group;

  TagBytes bytes{};
  const auto at = [&](MemTag tag) -> std::int64_t& { return bytes[static_cast<std::size_t>(tag)]; };
  // CPU offload keeps the f32 shards and the optimizer state in host memory (Device::host_ledger).
  const std::int64_t on_device = in.options.offload ? 0 : 1;
  at(MemTag::param_shard) = param_replica_full ? 0 : 4 * shards * on_device;
  at(MemTag::param_full) = (parameters_replicated(strategy) && f32 ? 0 : p * in_flight) +
                           (param_replica_full ? 4 * all : 0);
  at(MemTag::grad_shard) = grad_replica_full ? 0 : 4 * shards * on_device;
  at(MemTag::grad_full) = (gradients_replicated(strategy) && f32 ? 0 : p * (root + largest_other)) +
                          (grad_replica_full ? 4 * all : 0);
  at(MemTag::optim_state) = 4 * in.optimizer_states * shards * on_device;
  std::int64_t staging = 0;
  const std::int64_t offload_copy = in.options.offload ? 4 : 0;  // a shard's f32 device copy, per element
  for (const UnitSize& u : in.units) {
    // A gather: the offloaded shard's device copy, and its bf16 cast.
    const std::int64_t bf16_shard = !parameters_replicated(strategy) && !f32 ? p * u.shard_numel : 0;
    staging = std::max(staging, offload_copy * u.shard_numel + bf16_shard);
    // A reduction: the widened gradients or the bf16 output, beside the offloaded shard's device copy.
    std::int64_t reduce = offload_copy * u.shard_numel;
    if (!gradients_replicated(strategy) && in.options.param_dtype != in.options.reduce_dtype)
      reduce += r * u.padded_numel;
    if (!gradients_replicated(strategy) && in.options.reduce_dtype != DType::f32) reduce += r * u.shard_numel;
    staging = std::max(staging, reduce);
  }
  at(MemTag::comm_buffer) = staging;
  at(MemTag::activation) = in.model.activation;
  at(MemTag::workspace) = in.model.workspace + 4;
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
  bytes[static_cast<std::size_t>(MemTag::workspace)] = model_memory.workspace;
  return bytes;
}

}  // namespace fsdplab
