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
//
// Overlap (task 6, overlap_task.hpp): SYNC makes the compute stream wait for every collective and the
// collectives wait for compute, so nothing overlaps: the baseline ASYNC is timed against. ASYNC orders the streams
// by events only: a gather waits for nothing but the memory it writes, the compute stream waits for a
// unit's gather only when it needs the unit, and for a unit's reduction only before that unit's update.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "engine/runtime/dtype.hpp"

namespace fsdplab {

enum class ShardingStrategy { full_shard, shard_grad_op, hybrid_shard, no_shard, zero1, zero2 };
enum class OverlapMode { sync, async };
// Where the gather of the next unit is issued ahead of its need (PyTorch's BackwardPrefetch):
//   pre    in the pre-backward of the current unit: overlaps its backward compute, holds two units
//   post   in its post-backward, once its gradient is computed: less memory, less overlap
enum class BackwardPrefetch { none, pre, post };
// Where gathered parameters live: allocated per gather from the caching allocator (PyTorch), or two
// buffers allocated once that even and odd units take turns in (YaFSDP).
enum class UnshardBuffers { alloc, pool };
// Where the input embeddings' gradient goes (GPT-2's wte and wpe, in the root unit with the LM head tied to wte):
//   table  added into the tables' gradients and reduced with the root's at the backward's end (PyTorch FSDP)
//   rows   the rows' gradients all-gathered, each rank adding those of its own shard, so the root's other
//          gradients are reduced as soon as the backward leaves the LM head and the final norm
//          ([Note: the embedding's gradient as rows], engine/fsdp/unit_lifecycle.cpp)
enum class EmbeddingGradient { table, rows };

struct PrefetchPolicy {
  bool forward = false;  // in a unit's pre-forward, gather the next unit of the recorded forward order
  BackwardPrefetch backward = BackwardPrefetch::pre;
  // In the optimizer step, gather the next step's first unit once its update is issued, while the other
  // units' updates run ([Note: per-unit optimizer steps], engine/fsdp/unit_lifecycle.cpp).
  bool next_step = true;
  friend bool operator==(const PrefetchPolicy&, const PrefetchPolicy&) = default;
};

// The CLI's names: full, grad_op, hybrid, no_shard, zero1, zero2.
std::string_view strategy_name(ShardingStrategy s);
ShardingStrategy parse_strategy(std::string_view name);
std::string_view overlap_mode_name(OverlapMode m);  // sync, async
OverlapMode parse_overlap_mode(std::string_view name);
// The CLI's --prefetch: none, forward, backward-pre, backward-post, next-step, all (forward + backward-pre
// + next-step), or a comma list such as "forward,backward-post".
PrefetchPolicy parse_prefetch(std::string_view text);
std::string prefetch_name(const PrefetchPolicy& p);
std::string_view unshard_buffers_name(UnshardBuffers b);  // alloc, pool
UnshardBuffers parse_unshard_buffers(std::string_view name);
std::string_view embedding_gradient_name(EmbeddingGradient g);  // table, rows
EmbeddingGradient parse_embedding_gradient(std::string_view name);

// Every valid name, in the order of the tables the functions above parse with, for CLI checks, help
// texts and the dashboard's choices.
std::span<const std::string_view> strategy_names();        // full, grad_op, hybrid, no_shard, zero1, zero2
std::span<const std::string_view> prefetch_names();        // none, forward, backward-pre, backward-post, next-step, all
std::span<const std::string_view> unshard_buffers_names(); // alloc, pool
std::span<const std::string_view> embedding_gradient_names();  // table, rows
// The dtypes FSDP gathers, computes and reduces in (validate_fsdp_options): f32, bf16.
std::span<const std::string_view> fsdp_dtype_names();
// "a, b or c": `names` as an error message lists what was expected.
std::string names_list(std::span<const std::string_view> names);

struct FsdpOptions {
  ShardingStrategy strategy = ShardingStrategy::full_shard;
  int hybrid_group = 0;  // hybrid_shard: S, the ranks a unit is sharded over; must divide W
  DType param_dtype = DType::f32;
  DType reduce_dtype = DType::f32;
  // Every parameter starts at a multiple of this many elements of the flat buffer (16 bytes of f32,
  // as PyTorch aligns), so its view suits vector loads.
  std::int64_t align = 4;
  // Task 6. The defaults are PyTorch FSDP's (asynchronous, backward prefetch in pre-backward, at most
  // two gathers in flight, buffers from the caching allocator), plus the next step's first gather issued
  // during the optimizer step (PrefetchPolicy::next_step), which PyTorch FSDP does not do.
  OverlapMode mode = OverlapMode::async;
  PrefetchPolicy prefetch;
  // ASYNC with alloc buffers: at most this many gathered units (other than those kept gathered from
  // forward to backward, such as the root) hold memory at once; the host waits before the next
  // gather. 0: no limit (PyTorch's limit_all_gathers=False).
  int max_inflight = 2;
  UnshardBuffers buffers = UnshardBuffers::alloc;
  // CPU offload (PyTorch's CPUOffload(offload_params=True)): the f32 master and gradient shards and
  // the optimizer state live in pinned host memory; each gather starts with a host-to-device copy of
  // the shard, each reduction ends with a device-to-host copy, both on the memcpy stream, and the
  // optimizer steps on the CPU. Sharded strategies only (full, grad_op, hybrid).
  bool offload = false;
  EmbeddingGradient embedding_grad = EmbeddingGradient::table;  // --embedding-grad
  friend bool operator==(const FsdpOptions&, const FsdpOptions&) = default;
};

// `options` under SYNC: every collective blocks compute, so nothing is fetched ahead (no prefetch).
FsdpOptions sync_schedule(FsdpOptions options);

// An Error, before any rank starts, for a combination that cannot run on `world` ranks: world < 1,
// a hybrid group that is not given or does not divide W, dtypes other than f32 and bf16, or a bf16
// reduction of f32 gradients (reducing below the precision they were computed in loses bits for nothing),
// prefetch in SYNC mode, a negative --max-inflight, the two-buffer pool with a strategy that keeps
// units gathered from forward to backward, CPU offload with a replicated strategy, or the embedding's gradient
// as rows with a replicated strategy or CPU offload.
void validate_fsdp_options(const FsdpOptions& options, int world);

// S: how many ranks share one unit's shards.
int shard_group_size(const FsdpOptions& options, int world);
// W / S: how many ranks hold the same chunk of a unit (one per shard group), its replica group.
int replica_group_size(const FsdpOptions& options, int world);

// True when every rank keeps the whole f32 parameters between steps (no_shard, zero1, zero2).
bool parameters_replicated(ShardingStrategy s);
// True when every rank keeps the whole reduced gradient (no_shard, zero1).
bool gradients_replicated(ShardingStrategy s);
// True when the strategy frees the gathered parameters after a unit's forward (full, hybrid).
bool reshards_after_forward(ShardingStrategy s);

// "full W=4 (S=4), bf16 params, f32 reduce, async prefetch backward-pre, 2 in flight" — for run headers.
std::string describe(const FsdpOptions& options, int world);

}  // namespace fsdplab
