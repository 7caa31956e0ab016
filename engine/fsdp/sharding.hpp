// sharding.hpp — how an FSDP run shards: the strategy, the precision, and the groups they imply.
//
// Every strategy is one code path with two group sizes: a unit's FlatParameter is sharded over a
// shard group of S ranks, and the W / S groups holding the same shard (replica groups) all-reduce
// their gradient shards. So
//   full_shard     S = W   parameters, gradients and optimizer state sharded; reshard after forward
//   shard_grad_op  S = W   as full_shard, but parameters stay gathered from forward to backward
//   hybrid_shard   S < W   full_shard inside groups of S ranks (a node), all-reduce across groups
//   no_shard       S = 1   every rank holds everything; gradients all-reduced (DDP)
// and the ZeRO forms of task 5, where parameters stay whole on every rank between steps:
//   zero1          gradients all-reduced whole, optimizer state sharded, updated shards all-gathered
//   zero2          gradients reduce-scattered, optimizer state sharded, updated shards all-gathered
// Gradients are averaged over all W ranks in every strategy.
//
// Mixed precision (PyTorch's MixedPrecision): the master shard is always f32; `param_dtype` is what
// is all-gathered and computed in (activations too), `reduce_dtype` what gradients are reduced in.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/runtime/dtype.hpp"

namespace fsdplab {

enum class ShardingStrategy { full_shard, shard_grad_op, hybrid_shard, no_shard, zero1, zero2 };

// The CLI's names: full, grad_op, hybrid, no_shard, zero1, zero2.
std::string_view strategy_name(ShardingStrategy s);
ShardingStrategy parse_strategy(std::string_view name);

struct FsdpOptions {
  ShardingStrategy strategy = ShardingStrategy::full_shard;
  int hybrid_group = 0;  // hybrid_shard: S, the ranks a unit is sharded over; must divide W
  DType param_dtype = DType::f32;
  DType reduce_dtype = DType::f32;
  // Every parameter starts at a multiple of this many elements of the flat buffer (16 bytes of f32,
  // as PyTorch aligns), so its view suits vector loads.
  std::int64_t align = 4;
};

// An Error, before any rank starts, for a combination that cannot run on `world` ranks: world < 1,
// a hybrid group that is not given or does not divide W, dtypes other than f32 and bf16, or a bf16
// reduction of f32 gradients (reducing below the precision they were computed in loses bits for nothing).
void validate_fsdp_options(const FsdpOptions& options, int world);

// S: how many ranks share one unit's shards.
int shard_group_size(const FsdpOptions& options, int world);

// True when every rank keeps the whole f32 parameters between steps (no_shard, zero1, zero2).
bool parameters_replicated(ShardingStrategy s);
// True when every rank keeps the whole reduced gradient (no_shard, zero1).
bool gradients_replicated(ShardingStrategy s);
// True when the strategy frees the gathered parameters after a unit's forward (full, hybrid).
bool reshards_after_forward(ShardingStrategy s);

// "full_shard W=4 (S=4), bf16 params, f32 reduce" — for run headers.
std::string describe(const FsdpOptions& options, int world);

}  // namespace fsdplab
