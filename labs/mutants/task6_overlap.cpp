// Task 6's mutants: schedules with one mistake each (the pitfalls of labs/06-prefetch-overlap). Each is
// the reference (reference_overlap()) but for the one method the mistake is in.

#include "engine/fsdp/fsdp_unit.hpp"
#include "engine/fsdp/overlap_state.hpp"
#include "engine/fsdp/overlap_task.hpp"
#include "labs/mutants/mutants.hpp"

namespace fsdplab {
namespace {

const OverlapTask& reference() { return reference_overlap(); }

// The reference's rate-limited ASYNC acquire_full, but for `at_limit(s)`, which says when the limit holds the
// host (the reference: live_gathered(s) >= max_inflight).
template <class AtLimit>
bool acquire_limited(FsdpUnit& unit, FsdpRank& rank, bool prefetch, AtLimit at_limit) {
  OverlapState& s = rank.schedule;
  s.parked.release_completed(rank.device);
  while (at_limit(s) && s.parked.release_oldest_limited(rank.device)) {
  }
  if (prefetch && at_limit(s)) return false;
  unit.full.storage().allocate();
  return true;
}

// Forwards every call to the reference; a mutant overrides the one it gets wrong.
class LikeTheReference : public OverlapTask {
 public:
  explicit LikeTheReference(std::source_location origin = std::source_location::current()) : OverlapTask(origin) {}
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    return reference().acquire_full(unit, rank, prefetch);
  }
  void release_full(FsdpUnit& unit, FsdpRank& rank) const override { reference().release_full(unit, rank); }
  void acquire_grad(FsdpUnit& unit, FsdpRank& rank) const override { reference().acquire_grad(unit, rank); }
  void release_grad(FsdpUnit& unit, FsdpRank& rank) const override { reference().release_grad(unit, rank); }
  void release_staging(Tensor staging, const Event& done, FsdpRank& rank) const override {
    reference().release_staging(std::move(staging), done, rank);
  }
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    return reference().after(point, unit, rank);
  }
  void begin_forward(FsdpRank& rank) const override { reference().begin_forward(rank); }
  void end_backward(FsdpRank& rank) const override { reference().end_backward(rank); }
};

// ASYNC frees the gathered buffer when the host is done with it, not when the compute stream is.
class FreeAtHostTime final : public LikeTheReference {
 public:
  void release_full(FsdpUnit& unit, FsdpRank& rank) const override {
    if (rank.async() && unit.pool_slot < 0 && unit.state != UnitState::gathering) {
      unit.full.storage().free();
      return;
    }
    reference().release_full(unit, rank);
  }
};

// SYNC starts each gather without ordering it after the compute issued before it.
class SyncUnordered final : public LikeTheReference {
 public:
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    if (rank.async() || unit.pool_slot >= 0) return reference().acquire_full(unit, rank, prefetch);
    unit.full.storage().allocate();
    return true;
  }
};

// Never fetches ahead: every gather waits for its own unit's hook.
class NoPrefetch final : public LikeTheReference {
 public:
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    reference().after(point, unit, rank);  // keeps the recorded orders
    return nullptr;
  }
};

// Backward prefetch forgotten: after(pre_backward) names no unit, so each backward gather waits for its own hook.
class NoBackwardPrefetch final : public LikeTheReference {
 public:
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    FsdpUnit* next = reference().after(point, unit, rank);  // keeps the recorded orders
    return point == PassPoint::pre_backward ? nullptr : next;
  }
};

// The replica case left out: under no_shard and zero1 grad_full is the replica's gradient, which this parks and frees
// after the reduction like a unit's own, so the next backward adds into freed memory.
class FreesTheReplicaGradient final : public LikeTheReference {
 public:
  void acquire_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    if (unit.pool_slot >= 0) return reference().acquire_grad(unit, rank);
    if (rank.async()) rank.schedule.parked.release_completed(rank.device);
    unit.grad_full.storage().allocate();
  }
  void release_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    if (unit.pool_slot >= 0) return reference().release_grad(unit, rank);
    if (!rank.async()) rank.device.wait(Lane::compute, unit.reduced);
    if (rank.async()) {
      rank.schedule.parked.push(unit.grad_full.storage().release(), unit.reduced);
    } else {
      unit.grad_full.storage().free();
    }
  }
};

// BackwardPrefetch::post left out (its case in after() returns nothing): --prefetch backward-post prefetches nothing.
class NoPostBackwardPrefetch final : public LikeTheReference {
 public:
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    FsdpUnit* next = reference().after(point, unit, rank);  // keeps the recorded orders
    return point == PassPoint::post_backward ? nullptr : next;
  }
};

// The host waits for every stream before each gather: numbers right, overlap gone.
class HostSyncBeforeGather final : public LikeTheReference {
 public:
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    rank.device.synchronize();
    return reference().acquire_full(unit, rank, prefetch);
  }
};

// The rate limiter lets one unit too many hold memory (> where >= belongs).
class LimiterOffByOne final : public LikeTheReference {
 public:
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    if (!rank.async() || unit.pool_slot >= 0 || rank.options.max_inflight <= 0 || !rate_limited(unit))
      return reference().acquire_full(unit, rank, prefetch);
    const int limit = rank.options.max_inflight;
    return acquire_limited(unit, rank, prefetch, [limit](const OverlapState& s) { return live_gathered(s) > limit; });
  }
};

// A prefetch at a full limit declines at once, before the host has waited for the oldest parked unit: the limit
// holds, but prefetches the reference issues after its wait are lost, and their overlap with them.
class DeclinesWithoutWaiting final : public LikeTheReference {
 public:
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    if (!rank.async() || unit.pool_slot >= 0 || rank.options.max_inflight <= 0 || !rate_limited(unit))
      return reference().acquire_full(unit, rank, prefetch);
    OverlapState& s = rank.schedule;
    s.parked.release_completed(rank.device);
    if (prefetch && live_gathered(s) >= rank.options.max_inflight) return false;
    return reference().acquire_full(unit, rank, prefetch);
  }
};

// No rate limiter: every gather and prefetch goes ahead, however many gathered units hold memory.
class NoLimit final : public LikeTheReference {
 public:
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    if (!rank.async() || unit.pool_slot >= 0) return reference().acquire_full(unit, rank, prefetch);
    return acquire_limited(unit, rank, prefetch, [](const OverlapState&) { return false; });
  }
};

// begin_forward forgets to order the all-gather stream after the optimizer step.
class GathersBeforeOptimizer final : public LikeTheReference {
 public:
  void begin_forward(FsdpRank& rank) const override {
    OverlapState& s = rank.schedule;
    if (!s.forward_order.empty()) s.order_recorded = true;
    s.pre_forwards_seen = s.post_forwards_seen = 0;
    s.backward_started.clear();
  }
};

// Backward prefetch takes the next unit of the forward order, whose backward has run already in this pass.
class PrefetchesTheForwardsNext final : public LikeTheReference {
 public:
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    FsdpUnit* next = reference().after(point, unit, rank);
    const bool backward = point == PassPoint::pre_backward || point == PassPoint::post_backward;
    if (!backward || next == nullptr) return next;
    return next_in_forward(rank.schedule, unit);  // not next_in_backward
  }
};

// After a unit's backward, prefetches that unit again instead of the next: it is gathered and never used.
class PrefetchesItself final : public LikeTheReference {
 public:
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    FsdpUnit* next = reference().after(point, unit, rank);
    return point == PassPoint::post_backward ? &unit : next;
  }
};

// Fetches ahead in the backward the unit after this one in the forward's order: it has run its backward already, so
// it is gathered again and never used.
class BackwardPrefetchesInForwardOrder final : public LikeTheReference {
 public:
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    FsdpUnit* next = reference().after(point, unit, rank);  // which records the pass's order, as it must
    const BackwardPrefetch asked = rank.options.prefetch.backward;
    const bool fetches_here = (point == PassPoint::pre_backward && asked == BackwardPrefetch::pre) ||
                              (point == PassPoint::post_backward && asked == BackwardPrefetch::post);
    return fetches_here && rank.async() ? next_in_forward(rank.schedule, unit) : next;
  }
};

// Prefetches in each unit's post-backward unless the backward setting is post (!= where == belongs): --prefetch
// forward fetches ahead in the backward too, where nothing was asked.
class PostBackwardPrefetchUnasked final : public LikeTheReference {
 public:
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    FsdpUnit* next = reference().after(point, unit, rank);
    if (point == PassPoint::post_backward && rank.async() && rank.options.prefetch.backward != BackwardPrefetch::post)
      return next_in_backward(rank.schedule, unit);
    return next;
  }
};

// Never records which units started their backward: next_in_backward takes the forward's order reversed, and where
// the backward runs otherwise (Llama's MLP under --wrap linear) it prefetches a unit whose backward is done.
class BackwardStartsUnrecorded final : public LikeTheReference {
 public:
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    FsdpUnit* next = reference().after(point, unit, rank);
    if (point != PassPoint::pre_backward) return next;
    rank.schedule.backward_started.pop_back();  // the reference's record of this unit, taken back
    const bool prefetch = rank.async() && rank.options.prefetch.backward == BackwardPrefetch::pre;
    return prefetch ? next_in_backward(rank.schedule, unit) : nullptr;
  }
};

// The pool's gathers never wait for their slot's free event: a gather overwrites the slot's previous unit
// while compute still reads it.
class PoolWithoutFreeEvent final : public LikeTheReference {
 public:
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    if (unit.pool_slot < 0) return reference().acquire_full(unit, rank, prefetch);
    if (!rank.async()) rank.device.wait_stream(Lane::all_gather, Lane::compute);
    return true;  // no device.wait(Lane::all_gather, free)
  }
};

// The pool's case taken first: a pool unit's gather waits for its slot's free event only, and under SYNC skips the
// wait for all compute issued before it, so SYNC with --buffers pool overlaps its gathers with compute.
class PoolSkipsSyncWait final : public LikeTheReference {
 public:
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    if (unit.pool_slot < 0) return reference().acquire_full(unit, rank, prefetch);
    const Event& free = rank.schedule.param_pool_free[static_cast<std::size_t>(unit.pool_slot)];
    if (free.recorded()) rank.device.wait(Lane::all_gather, free);
    return true;
  }
};

// The rate limiter counts every gathered unit, the root too, which stays gathered from forward to backward:
// it takes one of the limit's places for the whole pass and stalls the prefetches.
class LimiterCountsTheRoot final : public LikeTheReference {
 public:
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    if (!rank.async() || unit.pool_slot >= 0 || rank.options.max_inflight <= 0)
      return reference().acquire_full(unit, rank, prefetch);
    const int limit = rank.options.max_inflight;
    return acquire_limited(unit, rank, prefetch, [limit](const OverlapState& s) {
      int gathered = s.parked.limited();  // every gathered unit, rate_limited or not
      for (const FsdpUnit* u : s.units) gathered += u->state != UnitState::sharded && u->pool_slot < 0;
      return gathered >= limit;
    });
  }
};

// Limits even with no limit (--max-inflight 0; limit >= 0 where limit > 0 belongs): before each gather the host waits
// for every parked unit's last reader, and declines every prefetch, which no limit asked for.
class LimitsWithNoLimit final : public LikeTheReference {
 public:
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    if (!rank.async() || unit.pool_slot >= 0 || rank.options.max_inflight != 0 || !rate_limited(unit))
      return reference().acquire_full(unit, rank, prefetch);
    return acquire_limited(unit, rank, prefetch, [](const OverlapState& s) { return live_gathered(s) >= 0; });
  }
};

// ASYNC frees the full gradient as soon as its reduction is issued, not once the reduction has read it.
class GradFreedAtOnce final : public LikeTheReference {
 public:
  void release_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    if (rank.async() && unit.pool_slot < 0 && !unit.grad_full.overlaps(unit.grad_replica)) {
      unit.grad_full.storage().free();
      return;
    }
    reference().release_grad(unit, rank);
  }
};

// ASYNC parks the full gradient as rate-limited, as release_full parks a gathered unit: the limiter then counts
// reductions in flight, and the host waits for them before the next gathers ([Note: a gradient counted by the rate
// limiter], grader/checks/task6_overlap.cpp).
class GradCountedByLimiter final : public LikeTheReference {
 public:
  void release_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    if (rank.async() && unit.pool_slot < 0 && !unit.grad_full.overlaps(unit.grad_replica)) {
      rank.schedule.parked.push(unit.grad_full.storage().release(), unit.reduced, rate_limited(unit));
      return;
    }
    reference().release_grad(unit, rank);
  }
};

// SYNC frees the full gradient without making the compute stream wait for its reduction first.
class SyncWithoutReducedWait final : public LikeTheReference {
 public:
  void release_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    if (rank.async() || unit.pool_slot >= 0 || unit.grad_full.overlaps(unit.grad_replica))
      return reference().release_grad(unit, rank);
    unit.grad_full.storage().free();
  }
};

// The gradient pool's zero-fill never waits for the slot's free event: it overwrites the previous unit's gradient
// while the reduce-scatter stream still reads it.
class GradPoolWithoutFreeEvent final : public LikeTheReference {
 public:
  void acquire_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    if (unit.pool_slot < 0) reference().acquire_grad(unit, rank);
    // no device.wait(Lane::compute, grad_pool_free[slot])
  }
};

// ASYNC never frees the parked buffers whose last user is done (no release_completed): the rate limiter still frees
// parked gathered units at its limit, but the parked gradients and staging copies stay allocated for good.
class NeverReleasesCompleted final : public LikeTheReference {
 public:
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    if (!rank.async() || unit.pool_slot >= 0) return reference().acquire_full(unit, rank, prefetch);
    OverlapState& s = rank.schedule;
    const int limit = rank.options.max_inflight;
    if (limit > 0 && rate_limited(unit)) {
      while (live_gathered(s) >= limit && s.parked.release_oldest_limited(rank.device)) {
      }
      if (prefetch && live_gathered(s) >= limit) return false;
    }
    unit.full.storage().allocate();
    return true;
  }
  void acquire_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    if (!rank.async() || unit.pool_slot >= 0 || unit.grad_full.overlaps(unit.grad_replica))
      return reference().acquire_grad(unit, rank);
    unit.grad_full.storage().allocate();
  }
  void end_backward(FsdpRank& rank) const override { check_prefetches_used(rank.schedule); }
};

// SYNC's wait in both modes: under ASYNC too the compute stream waits for each unit's reduction in release_grad, so
// the next unit's backward waits behind every reduce-scatter.
class ReleaseGradWaitsUnderAsync final : public LikeTheReference {
 public:
  void release_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    if (rank.async()) rank.device.wait(Lane::compute, unit.reduced);
    reference().release_grad(unit, rank);
  }
};

// end_backward makes the compute stream wait for every reduction, so the first units' updates wait for the last
// reduce-scatter instead of each for its own.
class EndBackwardWaitsForReductions final : public LikeTheReference {
 public:
  void end_backward(FsdpRank& rank) const override {
    reference().end_backward(rank);
    if (rank.async()) rank.device.wait_stream(Lane::compute, Lane::reduce_scatter);
  }
};

// The last-use event of a gathered buffer recorded on the all-gather stream, not the compute stream that read it last:
// the buffer is given back while compute may still read it.
class LastUseOnTheGatherStream final : public LikeTheReference {
 public:
  void release_full(FsdpUnit& unit, FsdpRank& rank) const override {
    if (!rank.async() || unit.pool_slot >= 0 || unit.state == UnitState::gathering)
      return reference().release_full(unit, rank);
    Event last_use("fsdp.full_last_use");
    rank.device.record(last_use, Lane::all_gather);
    rank.schedule.parked.push(unit.full.storage().release(), last_use, rate_limited(unit));
  }
};

// SYNC parks what it frees as ASYNC does (the ASYNC branch written for both modes): nothing releases a parked buffer
// under SYNC, so every step's gathered units, gradients and staging copies stay allocated.
class ParksUnderSync final : public LikeTheReference {
 public:
  void release_full(FsdpUnit& unit, FsdpRank& rank) const override {
    if (rank.async() || unit.pool_slot >= 0) return reference().release_full(unit, rank);
    rank.schedule.parked.push(unit.full.storage().release(), unit.gathered, rate_limited(unit));
  }
  void release_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    if (rank.async() || unit.pool_slot >= 0 || unit.grad_full.overlaps(unit.grad_replica))
      return reference().release_grad(unit, rank);
    rank.device.wait(Lane::compute, unit.reduced);
    rank.schedule.parked.push(unit.grad_full.storage().release(), unit.reduced);
  }
  void release_staging(Tensor staging, const Event& done, FsdpRank& rank) const override {
    rank.schedule.parked.push(staging.storage().release(), done);
  }
};

// SYNC parks a collective's temporary as ASYNC does: nothing releases it under SYNC, so each step's bf16 copies of
// the shards and f32 copies of the gradients stay allocated (comm_buffer grows every step).
class ParksStagingUnderSync final : public LikeTheReference {
 public:
  void release_staging(Tensor staging, const Event& done, FsdpRank& rank) const override {
    rank.schedule.parked.push(staging.storage().release(), done);
  }
};

// ASYNC drops a collective's temporary at once: its memory is freed while the collective still reads it.
class StagingFreedAtOnce final : public LikeTheReference {
 public:
  void release_staging(Tensor staging, const Event& done, FsdpRank& rank) const override {
    if (!rank.async()) reference().release_staging(std::move(staging), done, rank);
  }
};

// The replica's early return taken before SYNC's wait: under --mode sync with no_shard or zero1 (f32) the compute
// stream never waits for the gradient's all-reduce, and the optimizer reads the gradient while it is being reduced
// (training-sync-replicated).
class ReplicaReturnsBeforeSyncWait final : public LikeTheReference {
 public:
  void release_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    if (unit.grad_full.overlaps(unit.grad_replica)) return;  // before `if (!rank.async()) wait(compute, reduced)`
    reference().release_grad(unit, rank);
  }
};

// Forward prefetch forgotten: after(pre_forward) never names the next unit of the recorded order, so --prefetch forward
// (and all) gathers each unit only when the host reaches its pre-forward.
class NoForwardPrefetch final : public LikeTheReference {
 public:
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    FsdpUnit* next = reference().after(point, unit, rank);  // keeps the recorded orders
    return point == PassPoint::pre_forward ? nullptr : next;
  }
};

// Backward prefetch always issued at the pre-backward, whatever the policy's point: --prefetch backward-post
// prefetches where backward-pre does, and after(post_backward) never names a unit.
class PostPrefetchesAtPre final : public LikeTheReference {
 public:
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    FsdpUnit* next = reference().after(point, unit, rank);  // keeps the recorded orders (backward_started)
    if (point == PassPoint::post_backward) return nullptr;
    if (point == PassPoint::pre_backward && rank.async() && rank.options.prefetch.backward != BackwardPrefetch::none)
      return next_in_backward(rank.schedule, unit);
    return next;
  }
};

// Forward prefetch whatever the policy: once the order is recorded, after(pre_forward) names the next unit even when
// --prefetch has no `forward` (backward-pre, backward-post, the default); backward-prefetch counts the units after()
// names at each point.
class ForwardPrefetchUnasked final : public LikeTheReference {
 public:
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    FsdpUnit* next = reference().after(point, unit, rank);
    if (point == PassPoint::pre_forward && rank.async() && rank.schedule.order_recorded)
      return next_in_forward(rank.schedule, unit);
    return next;
  }
};

// end_backward without its check: a unit after() prefetched and the pass never ran again goes on gathering while the
// optimizer step writes its shard (unused-prefetch).
class UnusedPrefetchUnchecked final : public LikeTheReference {
 public:
  void end_backward(FsdpRank& rank) const override {
    if (rank.async()) rank.schedule.parked.release_completed(rank.device);
  }
};

// The last use recorded into one Event that every rank shares (a static): each rank's thread records it ([Note: an
// event belongs to one rank], engine/runtime/event.hpp).
class SharedLastUseEvent final : public LikeTheReference {
 public:
  void release_full(FsdpUnit& unit, FsdpRank& rank) const override {
    if (unit.state == UnitState::gathering) return reference().release_full(unit, rank);
    static Event last_use("fsdp.full_last_use");
    rank.device.record(last_use, Lane::compute);
    if (unit.pool_slot >= 0) {
      rank.schedule.param_pool_free[static_cast<std::size_t>(unit.pool_slot)] = last_use;
    } else if (rank.async()) {
      rank.schedule.parked.push(unit.full.storage().release(), last_use, rate_limited(unit));
    } else {
      unit.full.storage().free();
    }
  }
};

}  // namespace

std::span<const Mutant> overlap_mutants() {
  static const Mutant mutants[] = {
      {6, "free-at-host-time",
       "under ASYNC frees a gathered buffer at the host's time, while the compute stream may still read it",
       instance<FreeAtHostTime>},
      {6, "sync-unordered", "under SYNC starts a gather without ordering it after the compute issued before it",
       instance<SyncUnordered>},
      {6, "no-prefetch", "never returns a unit to fetch ahead, so no gather overlaps the compute before it",
       instance<NoPrefetch>},
      {6, "no-backward-prefetch", "after(pre_backward) names no unit, so no backward gather overlaps compute",
       instance<NoBackwardPrefetch>},
      {6, "no-post-backward-prefetch",
       "after(post_backward) names no unit: --prefetch backward-post prefetches nothing",
       instance<NoPostBackwardPrefetch>},
      {6, "frees-the-replica-gradient",
       "acquire_grad and release_grad treat the replica's gradient (no_shard, zero1) as a unit's own and free it",
       instance<FreesTheReplicaGradient>},
      {6, "host-sync",
       "synchronizes the host with the device before every gather, which kills the overlap prefetch buys",
       instance<HostSyncBeforeGather>},
      {6, "limiter-off-by-one", "lets max_inflight + 1 gathered units hold memory", instance<LimiterOffByOne>},
      {6, "no-limit", "never waits at the rate limit, so every gathered unit holds memory at once", instance<NoLimit>},
      {6, "post-backward-prefetch-unasked",
       "after(post_backward) names the next unit unless the policy is backward-post, so --prefetch forward fetches "
       "ahead "
       "in the backward too",
       instance<PostBackwardPrefetchUnasked>},
      {6, "backward-starts-unrecorded",
       "never records which units started their backward, so a backward that is not the forward's reversed prefetches "
       "a "
       "unit whose backward is done",
       instance<BackwardStartsUnrecorded>},
      {6, "limits-with-no-limit",
       "under --max-inflight 0 (no limit) waits for every parked unit before each gather and declines every prefetch",
       instance<LimitsWithNoLimit>},
      {6, "declines-without-waiting",
       "a prefetch at a full limit declines at once, where the host waits for the oldest parked unit first",
       instance<DeclinesWithoutWaiting>},
      {6, "gathers-before-optimizer",
       "does not order the next forward's gathers after the optimizer step that writes the shards",
       instance<GathersBeforeOptimizer>},
      {6, "prefetches-the-forwards-next",
       "backward prefetch names the next unit in the forward order, one that has run already",
       instance<PrefetchesTheForwardsNext>},
      {6, "prefetches-itself", "after a unit's backward, names that unit again, which the pass never uses",
       instance<PrefetchesItself>},
      {6, "backward-prefetches-in-forward-order",
       "in the backward, names the unit after this one in the forward's order, whose backward has run already",
       instance<BackwardPrefetchesInForwardOrder>},
      {6, "pool-without-free-event", "a gather into a pool slot does not wait for the slot's free event",
       instance<PoolWithoutFreeEvent>},
      {6, "pool-skips-sync-wait",
       "takes a pool unit's slot wait in place of SYNC's wait for all compute, so SYNC with the pool overlaps",
       instance<PoolSkipsSyncWait>},
      {6, "limiter-counts-the-root",
       "the rate limiter counts every gathered unit, the root included, not only rate_limited ones",
       instance<LimiterCountsTheRoot>},
      {6, "grad-freed-at-once",
       "under ASYNC frees the full gradient when its reduction is issued, while the reduce-scatter stream may still "
       "read it",
       instance<GradFreedAtOnce>},
      {6, "grad-counted-by-limiter",
       "under ASYNC parks the full gradient as rate-limited, so the host waits at the limit for reductions in flight",
       instance<GradCountedByLimiter>},
      {6, "sync-without-reduced-wait",
       "under SYNC frees the full gradient without the compute stream's wait for its reduction",
       instance<SyncWithoutReducedWait>},
      {6, "grad-pool-without-free-event", "the gradient pool's zero-fill does not wait for the slot's free event",
       instance<GradPoolWithoutFreeEvent>},
      {6, "staging-freed-at-once",
       "under ASYNC drops a collective's temporary (a bf16 copy of the shard) at once, while the collective still "
       "reads it",
       instance<StagingFreedAtOnce>},
      {6, "never-releases-completed",
       "under ASYNC never frees the parked buffers whose last user is done (no parked.release_completed)",
       instance<NeverReleasesCompleted>},
      {6, "release-grad-waits-under-async",
       "release_grad makes the compute stream wait for the reduction under ASYNC too, as SYNC does",
       instance<ReleaseGradWaitsUnderAsync>},
      {6, "end-backward-waits-for-reductions",
       "end_backward makes the compute stream wait for every reduction, so no update overlaps the last reductions",
       instance<EndBackwardWaitsForReductions>},
      {6, "last-use-on-the-gather-stream",
       "release_full records the buffer's last use on the all-gather stream, not the compute stream that read it",
       instance<LastUseOnTheGatherStream>},
      {6, "parks-under-sync",
       "under SYNC parks the gathered buffers, full gradients and staging copies as ASYNC does, where nothing releases "
       "them",
       instance<ParksUnderSync>},
      {6, "parks-staging-under-sync",
       "under SYNC parks a collective's temporary (a bf16 copy of the shard) as ASYNC does, where nothing releases it",
       instance<ParksStagingUnderSync>},
      {6, "replica-returns-before-sync-wait",
       "release_grad returns for the replica's gradient before SYNC's wait for unit.reduced: under SYNC with no_shard "
       "or "
       "zero1 compute never waits for the all-reduce",
       instance<ReplicaReturnsBeforeSyncWait>},
      {6, "no-forward-prefetch",
       "after(pre_forward) never names the next unit of the recorded forward order: --prefetch forward prefetches "
       "nothing",
       instance<NoForwardPrefetch>},
      {6, "post-prefetches-at-pre",
       "backward prefetch is issued at the pre-backward whatever the policy: --prefetch backward-post prefetches as "
       "backward-pre does",
       instance<PostPrefetchesAtPre>},
      {6, "forward-prefetch-unasked",
       "after(pre_forward) names the next unit whatever the policy, so --prefetch backward-pre fetches ahead in the "
       "forward too",
       instance<ForwardPrefetchUnasked>},
      {6, "unused-prefetch-unchecked",
       "end_backward never calls check_prefetches_used, so a prefetch its pass never used goes on gathering",
       instance<UnusedPrefetchUnchecked>},
      {6, "shared-last-use-event",
       "release_full records the last use into one static Event, which every rank's thread records: the ranks' records "
       "race on it",
       instance<SharedLastUseEvent>},
  };
  return mutants;
}

}  // namespace fsdplab
