// unit_lifecycle.hpp — the engine's side of FSDP on one rank: a unit's way through
//
//     sharded --unshard--> gathering --wait_for_unshard--> unsharded --reshard--> sharded
//
// the hooks that move it there, the order of units, the streams, and the layers around the tasks.
// During a step it is the only code that calls the tasks (fsdp_tasks.hpp), each for its own decisions, as
// PyTorch FSDP2's FSDPParamGroup.pre_forward calls unshard and wait_for_unshard and leaves the mechanics one
// level down.
// A hook here is a few lines of named steps:
//
//   pre_forward    unshard; wait_for_unshard; prefetch (task 6)
//   post_forward   reshard when task 3 says the unit frees after forward; prefetch
//   pre_backward   unshard again if the forward resharded; zero the gradient (task 4); prefetch
//   post_backward  reshard; prefetch; reduce the gradient (task 4, 8)
// around which the model's hooks mark the passes: the first pre-forward begins a forward (task 6), the
// post-backward of the last unit ends the backward (task 6).
//
// The layers a real FSDP adds are here, each a named step, not inside a task: mixed precision (cast the
// shard to bf16 before the gather, widen bf16 gradients before the sum), the replicated strategies
// (no gather, an all-reduce of the whole gradient), gradient accumulation (no reduction until the last
// micro-batch), CPU offload (task 9's copies around the collectives), and the staging buffers those need.
// While an observer listens, each hook runs in an ActivityScope naming the task and its implementation
// (fsdp_events.hpp), and reports its event when done.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/fsdp/fsdp_unit.hpp"
#include "engine/nn/model.hpp"

namespace fsdplab {

// --embedding-grad rows: the parts the root's gradient is reduced in, among `units` units (the root one of them):
// one beside each inner unit's backward ([Note: the embedding's gradient as rows]).
int root_reduction_parts(std::size_t units);

// --buffers pool: points `unit`'s gathered parameters and gradient (`full`, `grad_full`) at slot `slot` (0 or 1) of
// the pool in `s` ([Note: one unit at a time in a pool slot]).
void put_in_pool_slot(OverlapState& s, FsdpUnit& unit, int slot);

// Whether another training step follows an optimizer step (its forward can be prepared during it).
enum class NextForward { none, follows };

class UnitLifecycle {
 public:
  UnitLifecycle(FsdpRank& rank, const FsdpTasks& tasks) : rank_(rank), tasks_(tasks) {}

  // ---- the hooks (fully_sharded_model.cpp installs them on each unit's module) ------------------
  // The passes: a forward begins at the first pre-forward after anything else; a backward ends after
  // the post-backward of as many units as there are (call after each unit's post-backward).
  void enter_forward();
  void enter_backward();
  void leave_backward_if_last();

  void pre_forward(FsdpUnit& unit);
  void post_forward(FsdpUnit& unit);
  void pre_backward(FsdpUnit& unit);
  void post_backward(FsdpUnit& unit);

  // ---- named steps -------------------------------------------------------------------------------
  // Gathers a sharded unit (task 6's memory, task 3's all_gather), then makes compute wait for it (task
  // 3) and points the parameter views at it (task 2). Nothing to gather when it is unsharded already.
  void unshard(FsdpUnit& unit);
  // Issues a sharded unit's gather without making compute wait (state `gathering`). False when task 6's
  // rate limiter declined; nothing for a unit gathering or gathered.
  bool prefetch(FsdpUnit& unit);
  // Hands the unit's gathered parameters back to task 6; the views keep pointing at memory the unit no
  // longer owns.
  void reshard(FsdpUnit& unit);

  // ---- the optimizer (task 5, with CPU offload's host step) --------------------------------------
  std::unique_ptr<Optimizer> make_optimizer(std::span<FsdpUnit* const> units, const OptimizerSpec& spec) const;
  // One update of every unit's shard. Under ASYNC each waits for its own unit's reduction; with `follows`
  // the next forward's first unit may be gathered during the step ([Note: per-unit optimizer steps]).
  // max_grad_norm > 0 clips the gradient first (task 5's clip_grad_norm), after every reduction; the squared norm
  // it clipped by is returned (1-element f32, read it after a sync), else an undefined tensor.
  Tensor optimizer_step(Optimizer& optimizer, std::span<FsdpUnit* const> units, NextForward next, double max_grad_norm);

  // The unit's f32 master where the all-gather stream can read it: the master, or for an offloaded unit
  // a device copy made by task 9, to be released once the gather that reads it is done.
  Tensor shard_on_device(const FsdpUnit& unit, const std::string& purpose);

  // ---- --embedding-grad rows ([Note: the embedding's gradient as rows]) ---------------------------
  // The model's sink (fully_sharded_model.cpp): adds every rank's rows of the input embeddings' gradient into
  // this rank's shard of the root's gradient. False, for the model to add them into the tables itself, unless
  // the root's reduction was issued early in this backward.
  bool add_embedding_rows(const InputEmbeddingGradient& grad);

  const FsdpTasks& tasks() const { return tasks_; }

 private:
  // --buffers pool: puts the unit in a pool slot no other unit holds, for its gather; false for a prefetch that finds
  // none, where a gather compute needs takes one from a prefetch not used yet ([Note: one unit at a time in a pool
  // slot]).
  bool claim_pool_slot(FsdpUnit& unit, bool prefetch);
  // The gather itself, on the all-gather stream, ending with unit.gathered recorded there.
  void gather(FsdpUnit& unit);
  // Task 6's pick at `point` of `unit`'s pass, gathered ahead.
  void prefetch_after(PassPoint point, FsdpUnit& unit);
  // The averaged gradient into unit.grad_shard (or the whole replica), unit.reduced recorded behind it.
  void reduce_gradient(FsdpUnit& unit);
  // The mean over all W ranks of `grads` (in the reduce dtype, chunk r rank r's of the shard group) into `shard`
  // (f32): averaged over the S ranks of the shard group (task 4), then over the W / S replicas of this shard (task
  // 8, hybrid); a bf16 reduction through a bf16 output `unit.name`.`name`_bf16. Temporaries join `staging`.
  void reduce_scatter_mean(const FsdpUnit& unit, const Tensor& grads, const Tensor& shard, const std::string& name,
                           std::vector<Tensor>& staging);
  // Later work on the compute stream waits for every unit's gradient reduction issued this step.
  void compute_waits_for_every_reduction(std::span<FsdpUnit* const> units);
  // Task 5's clip_grad_norm on `lane` (compute, or host under offload), after every unit's reduction; the squared
  // norm, allocated on that lane.
  Tensor clip_grad_norm(std::span<FsdpUnit* const> units, double max_grad_norm, Lane lane);
  // ASYNC: the next step of `optimizer` updates the units in the order of `reduced`, each after its own
  // reduction; `gather_next` (or nullptr) updated mid-way and gathered for the next step right after
  // ([Note: per-unit optimizer steps]).
  void schedule_updates(Optimizer& optimizer, std::span<FsdpUnit* const> units, std::span<FsdpUnit* const> reduced,
                        FsdpUnit* gather_next);
  // The unit the next step's forward needs first, when the next-step prefetch applies; else nullptr.
  FsdpUnit* first_of_next_forward() const;
  // --embedding-grad rows, in each inner unit's pre-backward: the root's reduction (of all but the input
  // embeddings' gradient, which the sink adds later), its next part; at the first, the root's reshard.
  void reduce_root_part();
  // In `unit`'s post-backward: true, ending the record of it, when `unit` is the root reduced in parts during this
  // backward (its rows added since); false for every other unit, whose reduction is still to issue.
  bool end_root_reduction(FsdpUnit& unit);
  // In a unit's post-backward, ASYNC: true, holding its reduction back, when the root's parts are all issued and
  // only the rows are left (the backward's last inner unit): it is issued after the rows' gathers.
  bool held_for_the_rows(FsdpUnit& unit);
  void reduce_held_units();
  // Elements [begin, begin + count) of every rank's chunk of `unit`'s gradient, reduced into its shard.
  void reduce_part(FsdpUnit& unit, std::int64_t begin, std::int64_t count);

  FsdpRank& rank_;
  const FsdpTasks& tasks_;
  // The root's reduction in parts, from its first part to the root's post-backward.
  struct RootReduction {
    FsdpUnit* root = nullptr;
    int parts = 0;
    int issued = 0;
    std::vector<FsdpUnit*> held;  // units whose reduction waits for the rows' gathers (held_for_the_rows)
  } root_reduction_;
};

}  // namespace fsdplab
