// labs/06-prefetch-overlap/student.cpp — task 6: your OverlapTask (engine/fsdp/overlap_task.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 6=student
#include "engine/fsdp/overlap_task.hpp"
#include "engine/fsdp/lab_todo.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

// The bookkeeping every implementation needs is given, in engine/fsdp/overlap_state.hpp: rate_limited(unit),
// live_gathered(s), next_in_forward(s, unit), next_in_backward(s, unit), record_order(...),
// check_prefetches_used(s). Deciding when to call them is the lab.

// ==== YOUR TASK ======================================================================================

class StudentOverlap final : public OverlapTask {
 public:
  // ---- memory ---------------------------------------------------------------------------------------

  // Before a gather writes `unit.full`: make it allocated and safe to write from the all-gather stream.
  // For a prefetch (prefetch == true) you may decline when the rate limiter is full: return false,
  // having done nothing. Otherwise return true.
  //   SYNC (!rank.async()), pool units too: the gather must start after everything issued to the compute stream
  //     (rank.device.wait_stream(Lane::all_gather, Lane::compute)).
  //   Pool (unit.pool_slot >= 0): the buffer exists; the all-gather stream waits for the slot's free
  //     event rank.schedule.param_pool_free[slot] if it was recorded. The host never waits here.
  //   ASYNC: give back parked buffers that completed (rank.schedule.parked.release_completed); with
  //     rank.options.max_inflight > 0 and a rate_limited() unit, let the host wait for the oldest parked unit
  //     (parked.release_oldest_limited) while live_gathered() >= max_inflight; a prefetch still over the
  //     limit declines.
  //   Finally allocate: unit.full.storage().allocate().
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::acquire_full");
  }

  // After the last use of `unit.full`. The last user is the compute stream (record an Event there), or,
  // for a prefetched unit never used (unit.state == UnitState::gathering), its gather: unit.gathered.
  //   Pool: that event becomes param_pool_free[slot]. ASYNC: park the memory with it
  //   (parked.push(unit.full.storage().release(), last_use, rate_limited(unit))). SYNC: free it now.
  void release_full(FsdpUnit& unit, FsdpRank& rank) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::release_full");
  }

  // Before the compute stream zero-fills `unit.grad_full` in pre-backward.
  //   Nothing when grad_full is the replica (unit.grad_full.overlaps(unit.grad_replica)).
  //   Pool: the COMPUTE stream waits for grad_pool_free[slot] if recorded.
  //   Else: ASYNC gives back completed parked buffers first; then unit.grad_full.storage().allocate().
  void acquire_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::acquire_grad");
  }

  // After the reduction of `unit.grad_full` was issued and `unit.reduced` recorded: the reduced shard must
  // be ready before the optimizer reads it, the full gradient freed only after the reduction.
  //   SYNC: the compute stream waits for unit.reduced now.
  //   Then, unless grad_full is the replica: pool: unit.reduced becomes grad_pool_free[slot];
  //   ASYNC: park grad_full's memory with unit.reduced, not rate-limited (the limiter counts parameters); SYNC: free.
  void release_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::release_grad");
  }

  // A collective's temporary (a bf16 copy of the shard, an f32 copy of the gradient), last used by work
  // before `done`. ASYNC: park it with `done`. SYNC: nothing (compute waits for `done`; dropping the
  // tensor frees it).
  void release_staging(Tensor staging, const Event& done, FsdpRank& rank) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::release_staging");
  }

  // ---- schedule -------------------------------------------------------------------------------------

  // At each point of a unit's pass, after the lifecycle's own work there (post_backward: after the unit
  // was resharded, before its reduction is issued). Return the unit to gather now, ahead of its use, or
  // nullptr. The lifecycle issues it (acquire_full with prefetch = true first) unless it is gathering or
  // gathered already.
  //   pre_forward:  record/check the order (record_order on forward_order, pre_forwards_seen); forward
  //                 prefetch (rank.options.prefetch.forward) once the order is recorded: next_in_forward.
  //   post_forward: record/check post_forward_order (post_forwards_seen).
  //   pre_backward: note the unit in s.backward_started; BackwardPrefetch::pre: next_in_backward.
  //   post_backward: BackwardPrefetch::post: next_in_backward.
  //   SYNC returns nullptr always.
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::after");
  }

  // Before the first unit's forward of a pass: the order is recorded once a forward was seen
  // (forward_order not empty); reset pre_forwards_seen, post_forwards_seen and backward_started; ASYNC:
  // order the all-gather stream after the compute stream once (the optimizer step wrote the shards).
  void begin_forward(FsdpRank& rank) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::begin_forward");
  }

  // After the last unit's post-backward: a unit still `gathering` was prefetched and never used, an Error
  // (check_prefetches_used(s) raises it). ASYNC: give back completed parked buffers. (No wait for the reductions: the
  // engine's optimizer step makes each unit's update wait for that unit's own `reduced`.)
  void end_backward(FsdpRank& rank) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::end_backward");
  }
};

}  // namespace

const OverlapTask& student_overlap() {
  static const StudentOverlap task;
  return task;
}

}  // namespace fsdplab
