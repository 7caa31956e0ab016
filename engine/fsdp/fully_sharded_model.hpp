// fully_sharded_model.hpp — a model wrapped in FSDP units on one rank: the glue that plans the units (task 7),
// lays each out (task 2), asks task 3 which reshard after forward, installs the unit lifecycle's hooks,
// initialises the shards (task 1), loads them (task 2's slices) and gathers them whole for a save.
//
// The wrap policy names module kinds (GPT-2's "Block") or dotted module names ("transformer.wpe"):
// each such module starts a unit, inside the unit of its nearest wrapped ancestor if any (nested
// units), and the root unit takes every parameter no inner unit took (GPT-2's wte, wpe and ln_f). Each unit's module
// gets hooks that call the forward and backward tasks, so the model's own forward and backward run sharded without
// knowing it:
//   root pre_forward      gather the root (it stays gathered until the end of backward)
//   Block pre_forward     gather the Block          post_forward   reshard it (full_shard)
//   Block pre_backward    gather it again           post_backward  free, reduce-scatter
//   root post_backward    reduce-scatter the root's gradients (the tied wte's from both its uses)
// (with --embedding-grad rows, the root's gradients are reduced in parts, one in each Block's pre_backward, and the
// embedding's gradient reaches the root's shard as rows: [Note: the embedding's gradient as rows], unit_lifecycle.cpp)
// Ops launched inside a unit carry its index as their trace label.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/fsdp/forward_task.hpp"
#include "engine/fsdp/unit_lifecycle.hpp"
#include "engine/nn/checkpoint.hpp"
#include "engine/nn/model.hpp"

namespace fsdplab {

// --embedding-grad rows adds the input embeddings' gradient into the root unit's shard as rows: the model must have
// a learned token table, and its tables (GPT-2's wte and wpe, Llama's embed_tokens) must be the root unit's
// (`plans`' first), not units of their own. An Error saying which is not, and what to use instead. The constructor
// checks it, and FsdpRunPlan before any rank starts.
void check_embedding_rows_fit(Model& model, std::span<const UnitPlan> plans);

// --buffers pool: the units freed after their forward (forward.reshard_after_forward under `strategy`) take turns in
// two buffers, so none may be nested in another such unit, which is gathered at the same time. An Error naming the
// two, and what to use instead. The constructor checks it, and FsdpRunPlan before any rank starts.
void check_pool_units_take_turns(std::span<const UnitPlan> plans, const ForwardTask& forward,
                                 ShardingStrategy strategy);

class FullyShardedModel {
 public:
  // Plans the units (task 7) and allocates, per unit, the f32 master shard and the gradient shard (and
  // the whole replicas for replicated strategies) — never a whole unit for sharded ones; the parameter
  // views point at freed full buffers until a unit is gathered (under --buffers pool, into one of the two
  // pool buffers, each as large as the largest unit, which stay allocated). `tasks` must outlive this.
  FullyShardedModel(Model& model, FsdpRank& rank, const FsdpTasks& tasks, std::span<const std::string> unit_kinds);
  ~FullyShardedModel();
  FullyShardedModel(const FullyShardedModel&) = delete;
  FullyShardedModel& operator=(const FullyShardedModel&) = delete;

  Model& model() { return model_; }
  FsdpRank& rank() { return rank_; }
  std::span<FsdpUnit* const> units() const { return unit_ptrs_; }
  UnitLifecycle& lifecycle() { return lifecycle_; }
  const FsdpTasks& tasks() const { return lifecycle_.tasks(); }

  // Task 5: an optimizer over this rank's shards, and one step of it (after the backward). `next`: whether
  // another step follows, whose first unit may then be gathered during this one (the next-step prefetch).
  // max_grad_norm > 0 first clips the whole model's gradient to that 2-norm (--clip-grad-norm; [Note: clipping a
  // sharded gradient]) and returns its squared norm before clipping, every rank the same (a 1-element f32 tensor
  // to read after a sync); otherwise the tensor returned is undefined.
  std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec) const;
  Tensor optimizer_step(Optimizer& optimizer, NextForward next = NextForward::none, double max_grad_norm = 0);

  // Task 1: this rank's shards from the counter-based initialisation under `seed`.
  void init_parameters(std::uint64_t seed);
  // This rank's shards read from a checkpoint of the whole model.
  void load_parameters(const CheckpointFile& file);

  // Between steps (no pass under way, every unit sharded or gathering for the next step): the next steps run under
  // `schedule`'s overlap mode, prefetch and rate limit, as an A/B run alternates SYNC and ASYNC; every other option
  // must be the rank's already. The recorded pass orders are kept (ASYNC's prefetch replays them, whichever mode
  // recorded them); the buffers an ASYNC step left parked are given back when SYNC comes, since SYNC
  // frees at the host's time and never looks at them again. Called after the host synchronized with the
  // device, that moves no time.
  void set_overlap_schedule(const FsdpOptions& schedule);

  // Collective: gathers every unit's f32 master into whole f32 buffers, points the parameter values at
  // them, runs `body` (a save on one rank), and frees them again. Every unit must be sharded.
  void with_full_parameters(const std::function<void()>& body);

 private:
  class UnitHooks;
  class EmbeddingRows;
  struct LocalChunk {
    int chunk;      // which rank's shard of the unit, in the shard group
    Tensor values;  // where this rank keeps it, f32
  };
  // The chunks of `unit` this rank holds: its own shard, or for replicated strategies every chunk of
  // the whole replica.
  std::vector<LocalChunk> local_chunks(const FsdpUnit& unit) const;
  // --buffers pool: two buffers, each as large as the largest unit freed after forward, that those units take
  // turns in (even and odd in the forward's order to begin with).
  void use_buffer_pool();

  Model& model_;
  FsdpRank& rank_;
  UnitLifecycle lifecycle_;
  std::vector<std::unique_ptr<FsdpUnit>> units_;
  std::vector<FsdpUnit*> unit_ptrs_;
  std::vector<std::unique_ptr<UnitHooks>> hooks_;
  std::unique_ptr<EmbeddingRows> embedding_rows_;  // --embedding-grad rows: the model's sink
};

}  // namespace fsdplab
