// The reference overlap (task 6): SYNC, ASYNC with prefetch and the rate limiter, the two-buffer pool.
#include "engine/fsdp/overlap_task.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

class ReferenceOverlap final : public OverlapTask {
 public:
  // ---- memory -----------------------------------------------------------------------------------
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    Device& device = rank.device;
    OverlapState& s = rank.schedule;
    if (!rank.async()) {
      // SYNC: the gather starts after everything the compute stream was given, including the
      // optimizer step that wrote the shard and every user of the memory it may be handed.
      rank.device.wait_stream(Lane::all_gather, Lane::compute);
    }
    if (unit.pool_slot >= 0) {
      // The slot's previous unit records its free event where its last user ran; the all-gather
      // stream waits for it there. The host does not wait: it goes on issuing work.
      const Event& free = s.param_pool_free[static_cast<std::size_t>(unit.pool_slot)];
      if (free.recorded()) device.wait(Lane::all_gather, free);
      return true;
    }
    if (rank.async()) {
      s.parked.release_completed(device);
      const int limit = rank.options.max_inflight;
      if (limit > 0 && rate_limited(unit)) {
        // The rate limiter: the host waits for the oldest parked unit's last user, as PyTorch's
        // limit_all_gathers synchronises on a free event, until fewer than `limit` units hold memory.
        while (live_gathered(s) >= limit && s.parked.release_oldest_limited(device)) {
        }
        // Every counted unit is in use (nested units): a prefetch waits for its unit's own turn.
        if (prefetch && live_gathered(s) >= limit) return false;
      }
    }
    unit.full.storage().allocate();
    return true;
  }

  void release_full(FsdpUnit& unit, FsdpRank& rank) const override {
    Device& device = rank.device;
    // The last user: the compute stream, unless a prefetch gathered the unit and nothing used it.
    Event last_use("fsdp.full_last_use");
    if (unit.state == UnitState::gathering) {
      last_use = unit.gathered;
    } else {
      device.record(last_use, Lane::compute);
    }
    if (unit.pool_slot >= 0) {
      rank.schedule.param_pool_free[static_cast<std::size_t>(unit.pool_slot)] = last_use;
    } else if (rank.async()) {
      rank.schedule.parked.push(unit.full.storage().release(), last_use, rate_limited(unit));
    } else {
      // SYNC: compute waited for the gather, and every later gather waits for compute.
      unit.full.storage().free();
    }
  }

  void acquire_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    if (unit.grad_full.overlaps(unit.grad_replica)) return;  // the whole gradient is the replica
    if (unit.pool_slot >= 0) {
      const Event& free = rank.schedule.grad_pool_free[static_cast<std::size_t>(unit.pool_slot)];
      if (free.recorded()) rank.device.wait(Lane::compute, free);
      return;
    }
    if (rank.async()) rank.schedule.parked.release_completed(rank.device);
    unit.grad_full.storage().allocate();
  }

  void release_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    if (!rank.async()) {
      // SYNC: the compute stream waits for the reduction before going on.
      rank.device.wait(Lane::compute, unit.reduced);
    }
    if (unit.grad_full.overlaps(unit.grad_replica)) return;
    if (unit.pool_slot >= 0) {
      rank.schedule.grad_pool_free[static_cast<std::size_t>(unit.pool_slot)] = unit.reduced;
    } else if (rank.async()) {
      rank.schedule.parked.push(unit.grad_full.storage().release(), unit.reduced);
    } else {
      unit.grad_full.storage().free();
    }
  }

  void release_staging(Tensor staging, const Event& done, FsdpRank& rank) const override {
    // SYNC: the compute stream waits for `done` before anything else is issued, so freeing now is safe.
    if (rank.async()) rank.schedule.parked.push(staging.storage().release(), done);
  }

  // ---- schedule ---------------------------------------------------------------------------------
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    OverlapState& s = rank.schedule;
    const PrefetchPolicy& prefetch = rank.options.prefetch;
    FsdpUnit* next = nullptr;
    switch (point) {
      case PassPoint::pre_forward:
        record_order(s.forward_order, s.pre_forwards_seen, s.order_recorded, unit, "pre-forward");
        // Forward prefetch needs the order, known from the second forward on.
        if (prefetch.forward && s.order_recorded) next = next_in_forward(s, unit);
        break;
      case PassPoint::post_forward:
        record_order(s.post_forward_order, s.post_forwards_seen, s.order_recorded, unit, "post-forward");
        break;
      case PassPoint::pre_backward:
        s.backward_started.push_back(&unit);
        if (prefetch.backward == BackwardPrefetch::pre) next = next_in_backward(s, unit);
        break;
      case PassPoint::post_backward:
        if (prefetch.backward == BackwardPrefetch::post) next = next_in_backward(s, unit);
        break;
    }
    // SYNC fetches nothing ahead: every collective blocks compute anyway.
    return rank.async() ? next : nullptr;
  }

  void begin_forward(FsdpRank& rank) const override {
    OverlapState& s = rank.schedule;
    if (!s.forward_order.empty()) s.order_recorded = true;
    s.pre_forwards_seen = s.post_forwards_seen = 0;
    s.backward_started.clear();
    // ASYNC gathers wait for no compute work of their own; this once per pass orders them after the
    // optimizer step that wrote the shards they read (PyTorch's root pre-forward does the same).
    if (rank.async()) rank.device.wait_stream(Lane::all_gather, Lane::compute);
  }

  void end_backward(FsdpRank& rank) const override {
    OverlapState& s = rank.schedule;
    check_prefetches_used(s);
    // No wait for the reductions here: each unit's update waits for its own (the lifecycle's optimizer
    // step, [Note: per-unit optimizer steps] in unit_lifecycle.cpp), so the last reductions overlap the first updates.
    if (rank.async()) s.parked.release_completed(rank.device);
  }
};

}  // namespace

const OverlapTask& reference_overlap() {
  static const ReferenceOverlap task;
  return task;
}

}  // namespace fsdplab
