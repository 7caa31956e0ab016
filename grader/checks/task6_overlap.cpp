// Task 6's checks: OverlapTask (engine/fsdp/overlap_task.hpp, labs/06-prefetch-overlap).
//
// The schedule is read from the recorded op graph and the virtual clock of GPT-2 124M dry runs on 2 ranks
// (time and memory only, the second step, when forward prefetch knows the order), always beside the
// reference's schedule of the same run: SYNC overlaps nothing; ASYNC's prefetch makes the forward's and
// the backward's collectives overlap compute; the host never waits where it need not (the step time);
// the rate limiter bounds the gathered memory; the next forward's gathers wait for the optimizer step;
// the two-buffer pool runs clean. Then real trainings under each mode equal the single-rank baseline —
// and every run is watched by the race detector, which names both ops of a missing wait.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <map>
#include <optional>

#include "grader/check_catalog.hpp"
#include "grader/diagnostic_text.hpp"
#include "grader/graded_run.hpp"
#include "grader/rank_harness.hpp"

namespace fsdplab::grading {
namespace {

constexpr int kMeasuredStep = 1;  // the second step: forward prefetch replays the order the first recorded

// GPT-2 124M on 2 ranks, 2 steps of 4 x 512 tokens, as a dry run: 13 units (the root, 12 Blocks).
GradeCase gpt2_124m(OverlapMode mode, const std::string& prefetch, int max_inflight = 2,
                    UnshardBuffers buffers = UnshardBuffers::alloc) {
  GradeCase c;
  c.name = "gpt2 124M W2 dry run";
  c.run.model = "gpt2";
  c.run.preset = "gpt2";
  c.run.world = 2;
  c.run.batch = 4;
  c.run.seq = 512;
  c.run.steps = 2;
  c.dry_run = true;
  c.options.mode = mode;
  if (mode == OverlapMode::sync) c.options = sync_schedule(c.options);
  else c.options.prefetch = parse_prefetch(prefetch);
  c.options.max_inflight = max_inflight;
  c.options.buffers = buffers;
  return c;
}

// ---- reading the op graph ---------------------------------------------------------------------------------

// The compute op `op` overlaps, or nullptr.
const OpRecord* overlapped_compute(const OpRecord& op, const std::vector<OpRecord>& ops) {
  for (const OpRecord& c : ops)
    if (c.category == OpCategory::compute && intersects(op, c)) return &c;
  return nullptr;
}

// The measured step's collectives of `category` (any when nullopt) in `phase` ("" for any), by start.
std::vector<OpRecord> collectives(const std::vector<OpRecord>& ops, std::optional<OpCategory> category,
                                  const std::string& phase) {
  std::vector<OpRecord> out;
  for (const OpRecord& op : ops)
    if (is_communication(op.category) && (!category || op.category == *category) && op.labels.step == kMeasuredStep &&
        (phase.empty() || op.labels.phase == phase))
      out.push_back(op);
  std::sort(out.begin(), out.end(), [](const OpRecord& a, const OpRecord& b) { return a.begin < b.begin; });
  return out;
}

int count_overlapping(const std::vector<OpRecord>& collective_ops, const std::vector<OpRecord>& ops) {
  return static_cast<int>(std::count_if(collective_ops.begin(), collective_ops.end(),
                                        [&](const OpRecord& op) { return overlapped_compute(op, ops) != nullptr; }));
}

// The measured step's duration on rank 0, every stream: from its first op to its last.
SimTime step_time(const std::vector<OpRecord>& ops) {
  SimTime begin = -1, end = 0;
  for (const OpRecord& op : ops)
    if (op.labels.step == kMeasuredStep) {
      begin = begin < 0 ? op.begin : std::min(begin, op.begin);
      end = std::max(end, op.end);
    }
  return begin < 0 ? 0 : end - begin;
}

// ---- causes: a race, a replica's gradient -----------------------------------------------------------------

// [Note: the method a race names]
// The race detector names two ops that nothing orders; what the student must change is one of the memory methods,
// and the race tells which: the tag of the buffer the earlier op used, whether the block was freed and handed out
// again in between (then the free came too early: the release), or not (a pool slot, written again too early: the
// acquire), and the case's mode. "" where the race is none of these.
std::string race_mistake(const GradeCase& c, const RaceReport& race) {
  const bool sync = c.options.mode == OverlapMode::sync;
  const bool pool = c.options.buffers == UnshardBuffers::pool;
  switch (race.earlier_tag) {
    case MemTag::param_full:
      if (race.reused && sync)
        return "under SYNC release_full frees the gathered buffer at once, which is safe only because acquire_full "
               "orders every gather after the compute stream (rank.device.wait_stream(Lane::all_gather, "
               "Lane::compute)): without "
               "that order a gather wrote memory the compute stream still read";
      if (race.reused)
        return "release_full gave unit.full back while the compute stream still read it (freed at the host's time, or "
               "parked with an event of another stream): under ASYNC park its memory with an Event recorded on the "
               "compute stream after its last use (parked.push(unit.full.storage().release(), last_use, "
               "rate_limited(unit)))";
      if (pool)
        return "a gather into a pool slot overwrote the slot's previous unit while the compute stream still read it: "
               "acquire_full makes the all-gather stream wait for param_pool_free[slot] "
               "(device.wait(Lane::all_gather, free)), which release_full sets to the unit's last-use event. Where "
               "it does, a prefetch named a unit out of turn (after()), whose slot a unit still in use holds";
      return "";
    case MemTag::grad_full:
      if (race.reused && sync)
        return "under SYNC release_grad freed the full gradient before its reduction had read it: the compute stream "
               "waits for unit.reduced first (rank.device.wait(Lane::compute, unit.reduced)), then the memory is free";
      if (race.reused)
        return "release_grad freed unit.grad_full at the host's time while its reduction still read it: under ASYNC "
               "park its memory with unit.reduced (parked.push(unit.grad_full.storage().release(), unit.reduced))";
      if (pool)
        return "the zero-fill of a gradient pool slot overwrote the slot's previous gradient while its reduction "
               "still read it: acquire_grad makes the COMPUTE stream wait for grad_pool_free[slot], which "
               "release_grad sets to unit.reduced";
      return "";
    case MemTag::param_shard:
      // The optimizer step writes the shards on the compute stream; the gathers read them.
      if (race.earlier.lane == Lane::all_gather)
        return "a gather still read a unit's shard when the optimizer step wrote it: the unit was prefetched in the "
               "pass and never used (after() named a unit that does not run later in the pass), and end_backward let "
               "it through, which must refuse a unit still `gathering` (check_prefetches_used)";
      if (race.earlier.lane == Lane::compute)
        return "a gather read a unit's shard while the optimizer step still wrote it: begin_forward orders the "
               "all-gather stream after the compute stream under ASYNC (rank.device.wait_stream(Lane::all_gather, "
               "Lane::compute))";
      return "";
    case MemTag::comm_buffer:
      if (race.reused && !sync)
        return "release_staging let a collective's temporary go at once (dropping the tensor frees its memory) while "
               "a stream still read it: under ASYNC park it with `done` (parked.push(staging.storage().release(), "
               "done))";
      return "";
    default:
      return "";
  }
}

// The mistake a run's race names (race_mistake), "" for a run that did not race: a training's diagnosis
// (cause_of_training, equivalence_check), ahead of the check's own suspicion.
std::string race_diagnosis(const GradeCase& c, const GradedRun& run) {
  return run.race ? race_mistake(c, *run.race) : "";
}
// The same, as an equivalence check's `diagnose`.
std::string diagnose_race(const CheckContext&, const GradeCase& c, const GradedRun& graded, const GradedRun&, double) {
  return race_diagnosis(c, graded);
}

constexpr const char* kReplicaGradientCause =
    "the replica's gradient allocated or freed as a unit's own: under no_shard and zero1 grad_full is grad_replica, "
    "which lives as long as the model (acquire_grad and release_grad leave it: unit.grad_full.overlaps("
    "unit.grad_replica))";
// training-replicated's cause where its run stopped on a freed gradient: the replica case left out; "" otherwise.
std::string replica_gradient(const GradedRun& graded) {
  if (graded.error.find("flat_grad") != std::string::npos && graded.error.find("is freed") != std::string::npos)
    return kReplicaGradientCause;
  return "";
}

// ---- the schedule watch, and the mistakes it names --------------------------------------------------------

// The graded task seen through a wrapper: every call forwarded to `task`; a wrapper overrides the calls it watches or
// changes (ScheduleWatch, StrayPrefetch).
class ForwardingOverlap : public OverlapTask {
 public:
  explicit ForwardingOverlap(const OverlapTask& task) : OverlapTask(task.origin()), task_(task) {}
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    return task_.acquire_full(unit, rank, prefetch);
  }
  void release_full(FsdpUnit& unit, FsdpRank& rank) const override { task_.release_full(unit, rank); }
  void acquire_grad(FsdpUnit& unit, FsdpRank& rank) const override { task_.acquire_grad(unit, rank); }
  void release_grad(FsdpUnit& unit, FsdpRank& rank) const override { task_.release_grad(unit, rank); }
  void release_staging(Tensor staging, const Event& done, FsdpRank& rank) const override {
    task_.release_staging(std::move(staging), done, rank);
  }
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    return task_.after(point, unit, rank);
  }
  void begin_forward(FsdpRank& rank) const override { task_.begin_forward(rank); }
  void end_backward(FsdpRank& rank) const override { task_.end_backward(rank); }

 protected:
  const OverlapTask& task_;
};

// [Note: a prefetch declined without waiting]
// acquire_full may decline a prefetch (return false) at a full rate limit, but only after the host has waited for the
// parked rate-limited units (release_oldest_limited) and the limit is still full: every counted unit in use. A
// prefetch declined while a limited unit is still parked is one the reference issues after its wait: the limit
// holds, the memory is lower, and the overlap that prefetch bought is gone, which the overlap checks would blame on
// after(). The graded task runs wrapped in ScheduleWatch, which counts those declines as they happen.
//
// [Note: a gradient counted by the rate limiter]
// The limiter counts gathered parameters (release_full parks them with rate_limited(unit)); a full gradient parked
// as limited too (release_grad's push(..., true)) fills the limit with reductions in flight, and the host waits for
// them before the next gathers: a late step with no host sync in the code. ScheduleWatch counts those parkings.
//
// [Note: the units after() names]
// Whether a prefetch buys overlap depends on the run: under ASYNC the host runs ahead of the device, so a forward
// whose after(pre_forward) names nothing still finds its gathers issued early, and on the sim device's small cases
// overlaps as much. What the policy asks is structural: after() names the next unit at the points it serves
// (--prefetch forward: pre_forward; backward-pre: pre_backward; backward-post: post_backward) and at no other.
// ScheduleWatch counts the units after() names at each point, the reference's run too, and the prefetch checks
// compare the counts.
class ScheduleWatch final : public ForwardingOverlap {
 public:
  static constexpr std::size_t kPassPoints = 4;  // PassPoint's values

  using ForwardingOverlap::ForwardingOverlap;
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    const bool acquired = task_.acquire_full(unit, rank, prefetch);
    if (prefetch && !acquired && rank.schedule.parked.limited() > 0) ++without_waiting_;
    return acquired;
  }
  void release_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    const int limited = rank.schedule.parked.limited();
    task_.release_grad(unit, rank);
    if (rank.schedule.parked.limited() > limited) ++limited_grads_;
  }
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    FsdpUnit* next = task_.after(point, unit, rank);
    if (next) ++named_[static_cast<std::size_t>(point)];
    return next;
  }

  // Prefetches declined while a rate-limited unit was still parked, on every rank of the run.
  int without_waiting() const { return without_waiting_; }
  // Full gradients release_grad parked as rate-limited, on every rank of the run.
  int limited_grads() const { return limited_grads_; }
  // The units after() named at each pass point, on every rank of the run.
  std::array<int, kPassPoints> named() const {
    std::array<int, kPassPoints> counts{};
    for (std::size_t i = 0; i < kPassPoints; ++i) counts[i] = named_[i];
    return counts;
  }

 private:
  mutable std::atomic<int> without_waiting_{0}, limited_grads_{0};  // the ranks are threads of one process
  mutable std::array<std::atomic<int>, kPassPoints> named_{};
};

// Both runs of one case, the graded and the reference's; a failed graded run is the outcome.
struct Schedules {
  GradedRun graded, reference;
  std::optional<CheckOutcome> failed;
  int declined_without_waiting = 0;  // the graded run's (see the note above); the reference's is 0
  int limited_grads = 0;             // the graded run's gradients parked as rate-limited; the reference's is 0
  // The units after() named at each pass point ([Note: the units after() names]), in each run.
  std::array<int, ScheduleWatch::kPassPoints> named{}, reference_named{};
};

// A failed run's cause: cause_of_training's, `race_cause` (the missing wait the check makes likely) for a race that
// names no method.
Schedules schedules(const CheckContext& ctx, const GradeCase& c, const std::string& expected,
                    const std::string& race_cause =
                        "a buffer freed or reused, or a stream started, before the event "
                        "of its last user: see the two ops the race detector names") {
  Schedules s;
  FsdpTasks graded = ctx.tasks;
  const ScheduleWatch watch(*ctx.tasks.overlap);
  graded.overlap = &watch;
  s.graded = train_graded(c, graded, ctx.scratch, {.ops = true});
  s.declined_without_waiting = watch.without_waiting();
  s.limited_grads = watch.limited_grads();
  s.named = watch.named();
  FsdpTasks reference = ctx.reference;
  const ScheduleWatch reference_watch(*ctx.reference.overlap);
  reference.overlap = &reference_watch;
  s.reference = train_graded(c, reference, ctx.scratch, {.ops = true});
  s.reference_named = reference_watch.named();
  if (!s.graded.trained())
    s.failed = stopped_training(
        expected, s.graded, cause_of_training(s.graded, race_cause, "", [&] { return race_diagnosis(c, s.graded); }));
  else if (!s.reference.trained())
    throw Error("the reference's run of " + c.name + " failed: " + s.reference.error);
  return s;
}

std::int64_t peak_param_full(const GradedRun& r) {
  return budget_of(r).peak[static_cast<std::size_t>(MemTag::param_full)];
}

int forward_gathers_overlapping(const GradedRun& r) {
  return count_overlapping(collectives(r.ops[0], OpCategory::all_gather, "forward"), r.ops[0]);
}

int backward_collectives_overlapping(const GradedRun& r) {
  return count_overlapping(collectives(r.ops[0], std::nullopt, "backward"), r.ops[0]);
}

// The limiter held prefetches the reference's let through: fewer forward gathers overlap compute, and less is
// gathered at once.
bool limiter_held_prefetches(const Schedules& s) {
  return forward_gathers_overlapping(s.graded) < forward_gathers_overlapping(s.reference) &&
         peak_param_full(s.graded) < peak_param_full(s.reference);
}

// Where after() named more or fewer units at a pass point than the reference's ([Note: the units after() names]):
// "after(pre_forward) named 0 units to prefetch, the reference's 24"; "" where every count is the reference's.
std::string named_units_text(const Schedules& s) {
  static constexpr const char* kPoint[ScheduleWatch::kPassPoints] = {"pre_forward", "post_forward", "pre_backward",
                                                                     "post_backward"};
  std::string text;
  for (std::size_t i = 0; i < ScheduleWatch::kPassPoints; ++i)
    if (s.named[i] != s.reference_named[i])
      text += (text.empty() ? "" : "; ") + std::string("after(") + kPoint[i] + ") named " + std::to_string(s.named[i]) +
              " units to prefetch, the reference's " + std::to_string(s.reference_named[i]);
  return text;
}

// `declined` prefetches declined without waiting; no count where the diagnostic gives it elsewhere.
std::string declined_text(std::optional<int> declined = std::nullopt) {
  return "acquire_full declined " + (declined ? std::to_string(*declined) + " " : std::string()) +
         "prefetches while a rate-limited unit was still parked: at a full limit the host first waits for the "
         "oldest (while live_gathered(s) >= max_inflight: parked.release_oldest_limited(device)); a prefetch declines "
         "only if the limit is still full after that";
}

std::string limiter_held_text(const Schedules& s) {
  return "the rate limiter held prefetches the reference's let through (peak param_full " +
         megabytes(peak_param_full(s.graded)) + " against " + megabytes(peak_param_full(s.reference)) +
         "): it counts units that are not rate_limited, such as the root, gathered from its forward to its backward";
}

// [Note: the compute stream's waits]
// Under ASYNC the compute stream waits for a unit's gather before the unit's compute and, in the optimizer step, for
// each unit's reduction before its update (the engine's); nothing else. A wait for more — release_grad's wait for
// unit.reduced, which is SYNC's; end_backward waiting for every reduction — serialises compute behind
// communication with every loss right. The op graph shows each wait as a dependency of the next compute op on
// another stream's op (an event's; not the allocator's, WaitReason): counted per phase and stream in the measured
// step, beside the reference's.
using WaitCounts = std::map<std::pair<std::string, Lane>, int>;  // (phase, stream waited for) -> compute ops
WaitCounts compute_waits(const std::vector<OpRecord>& ops) {
  std::map<OpId, Lane> lane_of;
  for (const OpRecord& op : ops) lane_of[op.id] = op.lane;
  WaitCounts counts;
  for (const OpRecord& op : ops) {
    if (op.lane != Lane::compute || op.labels.step != kMeasuredStep) continue;
    for (const OpRef& dep : op.deps)
      if (const auto it = lane_of.find(dep.op);
          dep.reason == WaitReason::event && it != lane_of.end() && it->second != Lane::compute)
        ++counts[{op.labels.phase, it->second}];
  }
  return counts;
}

// The first (phase, stream) whose waits the graded compute stream makes more of than the reference's, in the
// student's terms; "" for none. See the note above.
std::string extra_compute_waits(const Schedules& s) {
  const WaitCounts graded = compute_waits(s.graded.ops[0]), reference = compute_waits(s.reference.ops[0]);
  for (const std::string phase : {"backward", "forward", "optimizer"})
    for (const auto& [key, n] : graded) {
      const auto& [at, lane] = key;
      const auto theirs = reference.find(key);
      const int m = theirs == reference.end() ? 0 : theirs->second;
      if (at != phase || n <= m) continue;
      const std::string waited = "the compute stream waited for the " + std::string(lane_name(lane)) + " stream " +
                                 std::to_string(n) + " times in the measured step's " + phase + ", the reference's " +
                                 std::to_string(m) + ": ";
      if (lane == Lane::reduce_scatter && phase == "backward")
        return waited +
               "release_grad's wait for unit.reduced is SYNC's; under ASYNC the full gradient is parked with "
               "it (parked.push(memory, unit.reduced)) and compute waits for no reduction";
      if (lane == Lane::reduce_scatter && phase == "optimizer")
        return waited +
               "each unit's update waits for its own reduction (the engine's optimizer step), so the last "
               "reductions overlap the first updates; end_backward (or the last release_grad) made compute "
               "wait for the reductions as well";
      return waited + "a stream made to wait for more than the event its next op needs";
    }
  return "";
}

// A schedule mistake the watch saw, in the student's terms; "" for none.
std::string watched_mistake(const Schedules& s) {
  if (s.declined_without_waiting > 0) return declined_text(s.declined_without_waiting);
  if (s.limited_grads > 0)
    return "release_grad parked " + std::to_string(s.limited_grads) +
           " full gradients as rate-limited (parked.push(..., true)): the limiter counts gathered parameters only, "
           "so the host waited at the limit for reductions in flight; park a gradient with its reduced event alone, "
           "parked.push(memory, unit.reduced)";
  return "";
}

// The mistake the watch saw, else a wait the op graph shows compute making beyond the reference's; "" for none.
std::string schedule_mistake(const Schedules& s) {
  if (std::string watched = watched_mistake(s); !watched.empty()) return watched;
  return extra_compute_waits(s);
}

// A pass over budget ("correct but wasteful: " and its symptoms) says why where the watch or the op graph shows it, as
// an equivalence check does (kLikelyMistake).
CheckOutcome with_budget(CheckOutcome outcome, const Schedules& s) {
  const bool passed = outcome.passed();
  outcome = grading::with_budget(std::move(outcome), s.graded, s.reference);
  if (const std::string mistake = schedule_mistake(s); passed && !outcome.passed() && !mistake.empty())
    outcome.cause += std::string(kLikelyMistake) + mistake;
  return outcome;
}

// A prefetch check that found the overlap but not the prefetches the policy asks for: half its points.
CheckOutcome named_units_differ(const Schedules& s, const GradeCase& c, std::string named) {
  return with_budget(
      CheckOutcome::fail("after() naming the next unit at the points --prefetch " + prefetch_name(c.options.prefetch) +
                             " serves, as often as the reference's",
                         std::move(named) + " (every rank, every step; the host running ahead hid it here)",
                         "after() names the next unit at the points the policy serves (forward: pre_forward, "
                         "next_in_forward; backward-pre: pre_backward, backward-post: post_backward, "
                         "next_in_backward) and nullptr at the others: test the policy's own setting at each point",
                         0.5),
      s);
}

// The mistake a failed schedule check names: its likely mistake where it passed over budget and found one, nothing
// where it names only the budget's symptoms, else its cause.
std::string named_mistake(const CheckOutcome& outcome) {
  if (const std::size_t at = outcome.cause.find(kLikelyMistake); at != std::string::npos)
    return outcome.cause.substr(at + kLikelyMistake.size());
  return outcome.cause.starts_with("correct but wasteful: ") ? "" : outcome.cause;
}

// A check of the schedules of case `c`, which its show command opens in the dashboard: paused at the task's first
// event, or, for what only whole runs side by side show (a step time, overlap, what the limiter holds), running
// (a break would hold the reference's run at the start of the step the graded one stops in).
using ScheduleCheck = CheckOutcome (*)(const CheckContext& ctx, const GradeCase& c);
enum class Shown { paused, whole_runs };

Check make(std::string id, std::string title, int points, const GradeCase& c, ScheduleCheck run,
           Shown shown = Shown::paused) {
  return {6,
          std::move(id),
          std::move(title),
          points,
          shown == Shown::paused ? c.dashboard_command(6) : c.command("gui", "{impl}"),
          [c, run](const CheckContext& ctx) { return run(ctx, c); }};
}

// ---- the schedule checks ----------------------------------------------------------------------------------

// The case shown (--buffers alloc), then the same with the two-buffer pool, whose units take their slot's free event
// in acquire_full: under SYNC that wait comes on top of the wait for all compute, not in its place.
CheckOutcome sync_overlaps_nothing(const CheckContext& ctx, const GradeCase& sync) {
  GradeCase pooled = sync;
  pooled.options.buffers = UnshardBuffers::pool;
  std::optional<CheckOutcome> passed;
  for (const GradeCase* c : std::initializer_list<const GradeCase*>{&sync, &pooled}) {
    const bool pool = c == &pooled;
    const std::string expected = std::string(
                                     "every collective after the compute before it and before the compute "
                                     "after it") +
                                 (pool ? " (--buffers pool)" : "");
    const Schedules s = schedules(ctx, *c, expected, "SYNC must order each gather after all compute issued before it");
    if (s.failed) return *s.failed;
    for (const std::vector<OpRecord>& ops : s.graded.ops)
      for (const OpRecord& op : ops)
        if (is_communication(op.category))
          if (const OpRecord* overlapped = overlapped_compute(op, ops)) {
            // The case shown passed where only the pool's overlaps: half the points.
            CheckOutcome fail = CheckOutcome::fail(
                expected,
                "'" + op.name + "' [" + us(op.begin) + ", " + us(op.end) + "] overlaps compute '" + overlapped->name +
                    "' [" + us(overlapped->begin) + ", " + us(overlapped->end) + "]",
                pool ? "SYNC's wait for all compute left out for pool units: in acquire_full the pool's slot wait "
                       "(unit.pool_slot >= 0) comes after rank.device.wait_stream(Lane::all_gather, Lane::compute), "
                       "which SYNC makes for every gather"
                     : "SYNC without rank.device.wait_stream(Lane::all_gather, Lane::compute) in acquire_full, or "
                       "without the compute stream's wait for unit.reduced in release_grad",
                pool ? 0.5 : 0);
            if (pool) fail.show = c->dashboard_command(6);
            return with_budget(std::move(fail), s);
          }
    if (!passed) passed = with_budget(CheckOutcome::pass(), s);  // the budget of the case shown
  }
  return *passed;
}

CheckOutcome forward_gathers_overlap_compute(const CheckContext& ctx, const GradeCase& forward) {
  const std::string expected = "as many forward gathers overlapping compute as the reference's";
  const Schedules s = schedules(ctx, forward, expected);
  if (s.failed) return *s.failed;
  const int got = forward_gathers_overlapping(s.graded), want = forward_gathers_overlapping(s.reference);
  const int gathers = static_cast<int>(collectives(s.graded.ops[0], OpCategory::all_gather, "forward").size());
  if (got >= want) {
    // Only where asked: --prefetch forward fetches nothing ahead in the backward, whose gathers then wait for need.
    const auto backward_gathers_overlapping = [](const GradedRun& r) {
      return count_overlapping(collectives(r.ops[0], OpCategory::all_gather, "backward"), r.ops[0]);
    };
    const int ahead = backward_gathers_overlapping(s.graded),
              reference_ahead = backward_gathers_overlapping(s.reference);
    if (ahead <= reference_ahead) {
      if (std::string named = named_units_text(s); !named.empty()) return named_units_differ(s, forward, named);
      return with_budget(CheckOutcome::pass(), s);
    }
    return with_budget(
        CheckOutcome::fail("no backward gather fetched ahead (--prefetch forward asks for none there)",
                           std::to_string(ahead) + " backward gathers overlap compute, the reference's " +
                               std::to_string(reference_ahead),
                           "after(pre_backward) and after(post_backward) name a unit only under "
                           "--prefetch backward-pre and backward-post: test the policy's backward "
                           "setting for the one each point serves",
                           0.5),
        s);
  }
  return with_budget(
      CheckOutcome::fail(expected + " (" + std::to_string(want) + ")",
                         std::to_string(got) + " of " + std::to_string(gathers) + " forward gathers overlap compute",
                         s.declined_without_waiting > 0 ? declined_text(s.declined_without_waiting)
                         : limiter_held_prefetches(s)
                             ? limiter_held_text(s)
                             : "after(pre_forward) must return the next unit of the recorded forward order "
                               "(next_in_forward) once the order is recorded, and nothing may make the host wait "
                               "for a gather before the compute it should overlap is issued",
                         static_cast<double>(got) / std::max(1, want)),
      s);
}

CheckOutcome backward_collectives_overlap_compute(const CheckContext& ctx, const GradeCase& backward) {
  const std::string expected = "as many backward collectives overlapping compute as the reference's";
  const Schedules s = schedules(ctx, backward, expected);
  if (s.failed) return *s.failed;
  const int got = backward_collectives_overlapping(s.graded), want = backward_collectives_overlapping(s.reference);
  const int total = static_cast<int>(collectives(s.graded.ops[0], std::nullopt, "backward").size());
  if (got >= want) {
    if (std::string named = named_units_text(s); !named.empty()) return named_units_differ(s, backward, named);
    return with_budget(CheckOutcome::pass(), s);
  }
  const std::string extra_waits = extra_compute_waits(s);
  return with_budget(
      CheckOutcome::fail(
          expected + " (" + std::to_string(want) + ")",
          std::to_string(got) + " of " + std::to_string(total) + " backward collectives overlap compute",
          // Less overlap with less memory gathered: prefetches held back, not gathered out of turn.
          s.declined_without_waiting > 0                             ? declined_text(s.declined_without_waiting)
          : peak_param_full(s.graded) < peak_param_full(s.reference) ? limiter_held_text(s)
          : !extra_waits.empty()
              ? extra_waits
              : "after(" +
                    std::string(backward.options.prefetch.backward == BackwardPrefetch::post ? "post_backward"
                                                                                             : "pre_backward") +
                    ") must return the unit whose backward comes next (next_in_backward: the reverse "
                    "of the post-forward order), or a host wait serialises the backward",
          static_cast<double>(got) / std::max(1, want)),
      s);
}

// BackwardPrefetch's two points, each half the check: `backward` (pre: in the unit's pre-backward) and the same case
// with post (in its post-backward, after its gradients are issued). A post case whose prefetch is missing says so, with
// the dashboard on that case.
CheckOutcome backward_pre_and_post_overlap_compute(const CheckContext& ctx, const GradeCase& backward) {
  GradeCase post = backward;
  post.options.prefetch = parse_prefetch("backward-post");
  CheckOutcome pre = backward_collectives_overlap_compute(ctx, backward),
               after = backward_collectives_overlap_compute(ctx, post);
  if (pre.passed() && after.passed()) return pre;
  CheckOutcome& shown = pre.passed() ? after : pre;
  if (!after.passed()) {
    after.expected = "--prefetch backward-post: " + after.expected;
    after.show = post.command("gui", "{impl}");
  }
  shown.fraction = (pre.fraction + after.fraction) / 2;
  return shown;
}

// What the measured step's op graph shows made it slower than the reference's.
std::string slow_step_cause(const Schedules& s) {
  if (const std::string mistake = schedule_mistake(s); !mistake.empty()) return mistake;
  if (limiter_held_prefetches(s)) return limiter_held_text(s);
  const int idle = issued_on_an_idle_device(s.graded.ops[0], kMeasuredStep),
            reference_idle = issued_on_an_idle_device(s.reference.ops[0], kMeasuredStep);
  if (idle > reference_idle)
    return "the host waited for the device: " + std::to_string(idle) +
           " ops issued once it had run dry, the "
           "reference's " +
           std::to_string(reference_idle) +
           ". A host sync (device.synchronize) where a stream wait "
           "would do stops the issuing, so the next gathers start late; the rate limiter is the one place the host "
           "may wait, only while the limit is full";
  const int backward = backward_collectives_overlapping(s.graded);
  const int reference_backward = backward_collectives_overlapping(s.reference);
  if (backward < reference_backward)
    return std::to_string(backward) + " backward collectives overlap compute, the reference's " +
           std::to_string(reference_backward) +
           ": after(pre_backward) names no unit, or not the one whose backward "
           "comes next (next_in_backward)";
  const int forward = forward_gathers_overlapping(s.graded),
            reference_forward = forward_gathers_overlapping(s.reference);
  if (forward < reference_forward)
    return std::to_string(forward) + " forward gathers overlap compute, the reference's " +
           std::to_string(reference_forward) +
           ": after(pre_forward) names no unit, or not the next of the recorded "
           "order (next_in_forward)";
  return "one of: a host sync (device.synchronize) where a stream wait would do, a prefetch missing or of the wrong "
         "unit (after()), a rate limiter that holds prefetches it should let through, or a stream wait for more than "
         "the event the op needs";
}

// The case shown (--max-inflight 2), then the same with no limit (--max-inflight 0, PyTorch's
// limit_all_gathers=False), where the host never waits for a parked unit's memory.
CheckOutcome step_time_as_the_reference(const CheckContext& ctx, const GradeCase& all) {
  const GradeCase unlimited = [&] {
    GradeCase c = all;
    c.options.max_inflight = 0;
    return c;
  }();
  std::optional<CheckOutcome> passed;
  for (const GradeCase* c : {&all, &unlimited}) {
    const std::string limit = c->options.max_inflight == 0 ? " with no limit (--max-inflight 0)" : "";
    const std::string expected = "a step no longer than the reference's + 1%" + limit;
    const auto with_reference = [&](SimTime reference) {
      return "a step no longer than the reference's " + ms(reference) + " + 1%" + limit;
    };
    const Schedules s = schedules(ctx, *c, expected);
    if (s.failed) return *s.failed;
    const SimTime got = step_time(s.graded.ops[0]), want = step_time(s.reference.ops[0]);
    if (static_cast<double>(got) > 1.01 * static_cast<double>(want)) {
      const std::string cause =
          c == &unlimited ? "with no limit the host waited for parked units' memory: the rate limiter must do nothing "
                            "at --max-inflight 0 (limit > 0), and only for rate_limited units"
                          : slow_step_cause(s);
      // The case shown passed where only the unlimited one is slow: half the points.
      CheckOutcome slow =
          CheckOutcome::fail(with_reference(want), "step 2 takes " + ms(got), cause, c == &unlimited ? 0.5 : 0);
      if (c == &unlimited) slow.show = c->command("gui", "{impl}");  // whole runs, as the check's own
      return with_budget(std::move(slow), s);
    }
    if (!passed) passed = with_budget(CheckOutcome::pass(), s);  // the budget of the case shown
  }
  return *passed;
}

// The case shown runs at each limit (--max-inflight 1 and 2), rebuilt from gpt2_124m.
CheckOutcome rate_limiter_bounds_gathered_units(const CheckContext& ctx, const GradeCase& /*shown*/) {
  double earned = 0;
  std::string got;
  std::int64_t reference_at_limit_1 = 0, block = 0, excess = 0;
  std::string declined;  // the cause, where a limit declined prefetches without waiting
  int backward_overlapping = 0, reference_backward_overlapping = 0;  // at a limit where the prefetch is off
  for (int limit : {1, 2}) {
    const GradeCase c = gpt2_124m(OverlapMode::async, "all", limit);
    const Schedules s = schedules(ctx, c, "");
    if (s.failed) {
      CheckOutcome failed = *s.failed;
      failed.expected = "at most " + std::to_string(limit) + " gathered Blocks' memory";
      return failed;
    }
    const std::int64_t mine = peak_param_full(s.graded), theirs = peak_param_full(s.reference);
    if (const int overlapping = backward_collectives_overlapping(s.graded),
        reference_overlapping = backward_collectives_overlapping(s.reference);
        overlapping < reference_overlapping)
      backward_overlapping = overlapping, reference_backward_overlapping = reference_overlapping;
    if (limit == 1)
      reference_at_limit_1 = theirs;
    else
      block = theirs - reference_at_limit_1;  // one more gathered Block's memory
    // A limit holds memory down by waiting, not by losing prefetches (see [Note: a prefetch declined without waiting]).
    if (mine <= theirs && s.declined_without_waiting == 0) {
      earned += 0.5;
      continue;
    }
    got += (got.empty() ? "" : "; ") + std::string("--max-inflight ") + std::to_string(limit) + ": ";
    if (s.declined_without_waiting > 0) {
      got += std::to_string(s.declined_without_waiting) + " prefetches declined while a rate-limited unit was parked";
      declined = declined_text();
      continue;
    }
    excess = std::max(excess, mine - theirs);
    got += "peak param_full " + megabytes(mine) + ", the reference's " + megabytes(theirs);
  }
  if (earned >= 1) return CheckOutcome::pass();
  if (excess == 0)  // every limit lost its half to declines alone
    return CheckOutcome::fail("at each limit, no prefetch declined that the reference's wait lets through", got,
                              declined, earned);
  const double blocks = static_cast<double>(excess) / static_cast<double>(std::max<std::int64_t>(1, block));
  std::string cause;
  if (backward_overlapping < reference_backward_overlapping)
    // A prefetch of a unit that is not next gathers memory the limiter never meant to hold, and leaves the backward
    // without its overlap: the prefetch is the mistake, not the limit.
    cause = "the backward prefetch gathered units out of turn (" + std::to_string(backward_overlapping) +
            " backward collectives overlap compute, the reference's " + std::to_string(reference_backward_overlapping) +
            "), each holding memory the limit did not plan for: after(pre_backward) returns the unit whose backward "
            "comes next (next_in_backward)";
  else if (blocks <= 1.01)
    cause = "one gathered Block more than the limit: the limiter lets one unit too many hold memory (> instead of >=)";
  else
    cause = "param_full up to " + std::to_string(std::llround(blocks)) +
            " Blocks' worth above the reference's (buffers parked for their last reader count too): the host never "
            "waits at the limit (while live_gathered(s) >= max_inflight, release the oldest rate_limited unit), or a "
            "prefetch is not refused there";
  // One limit declined prefetches, the other held too much: both said.
  if (!declined.empty()) cause = declined + "; and at the other limit " + cause;
  return CheckOutcome::fail("param_full no higher than the reference's at each limit", got, cause, earned);
}

CheckOutcome first_gather_waits_for_the_optimizer(const CheckContext& ctx, const GradeCase& all) {
  const std::string expected =
      "the measured step's first gather ordered after the compute stream's last op of the step before";
  const Schedules s = schedules(ctx, all, expected);
  if (s.failed) return *s.failed;
  for (const std::vector<OpRecord>& ops : s.graded.ops) {
    const std::vector<OpRecord> gathers = collectives(ops, OpCategory::all_gather, "forward");
    if (gathers.empty()) continue;
    const OpRecord& first = gathers.front();
    // The optimizer's update is the compute stream's last op of the step before.
    OpId last_update = 0;
    for (const OpRecord& op : ops)
      if (op.lane == Lane::compute && op.labels.step == kMeasuredStep - 1) last_update = std::max(last_update, op.id);
    const bool ordered = std::any_of(first.deps.begin(), first.deps.end(), [&](const OpRef& d) {
      return d.op >= last_update && d.reason == WaitReason::event;
    });
    if (!ordered)
      return CheckOutcome::fail(
          expected,
          "'" + first.name + "' waits for no event of the optimizer step (op #" + std::to_string(last_update) + ")",
          "begin_forward must order the all-gather stream after the compute stream "
          "(rank.device.wait_stream(Lane::all_gather, Lane::compute)) under ASYNC: the trainer's host sync between "
          "steps hides it in fsdplab run, not on a GPU");
  }
  return CheckOutcome::pass();
}

CheckOutcome pool_clean_and_no_bigger(const CheckContext& ctx, const GradeCase& pool) {
  const std::string expected = "the pool's slots reused only after their free events";
  const Schedules s = schedules(
      ctx, pool, expected, "the gather into a slot must wait (on the all-gather stream) for the slot's free event");
  if (s.failed) return *s.failed;
  const std::int64_t mine = budget_of(s.graded).peak[static_cast<std::size_t>(MemTag::param_full)];
  const std::int64_t theirs = budget_of(s.reference).peak[static_cast<std::size_t>(MemTag::param_full)];
  if (mine > theirs)
    return with_budget(CheckOutcome::fail("peak param_full of two buffers (" + megabytes(theirs) + ")", megabytes(mine),
                                          "a pool unit allocated memory of its own"),
                       s);
  return with_budget(CheckOutcome::pass(), s);
}

// ---- the memory checks ------------------------------------------------------------------------------------

// [Note: memory left behind]
// A parked buffer (DeferredFrees) is freed once its last user is done, by release_completed, which the reference
// calls under ASYNC only: under SYNC each buffer is freed at once (compute waited for its users), so one parked there
// is never freed. Each step then leaves more allocated than the step before, until the device runs out, with every
// loss right. A run in steady state leaves each step what the step before left; the first step differs (no order
// recorded, nothing prefetched) and so does the last (no next forward gathered), so the check reads the ends of the
// second and third steps of a four-step run, tag by tag. bf16 parameters and an f32 reduction make the staging copies
// (release_staging) that the other cases have none of.

// Case `c` with four steps, bf16 parameters reduced in f32: see the note above.
GradeCase four_steps_in_bf16(GradeCase c) {
  c.name += ", bf16, 4 steps";
  c.run.steps = 4;
  c.options.param_dtype = DType::bf16;
  return c;
}

// The method whose buffers a tag holds, for the cause.
std::string releasing_method(MemTag tag) {
  switch (tag) {
    case MemTag::param_full:
      return "release_full";
    case MemTag::grad_full:
      return "release_grad";
    case MemTag::comm_buffer:
      return "release_staging";
    default:
      return "";
  }
}

// The first tag whose bytes the third step's end holds more of than the second's, on any rank, as "got"; nullopt for
// none.
struct Growth {
  int rank = 0;
  MemTag tag{};
  std::int64_t second = 0, third = 0;
};
std::optional<Growth> memory_growth(const GradedRun& run) {
  for (std::size_t rank = 0; rank < run.live_at_step_end.size(); ++rank) {
    const std::vector<TagBytes>& ends = run.live_at_step_end[rank];
    if (ends.size() < 3) continue;
    for (MemTag tag : kAllMemTags) {
      const auto t = static_cast<std::size_t>(tag);
      if (ends[2][t] > ends[1][t]) return Growth{static_cast<int>(rank), tag, ends[1][t], ends[2][t]};
    }
  }
  return std::nullopt;
}

// SYNC, then ASYNC, each half the points: see [Note: memory left behind].
CheckOutcome memory_released(const CheckContext& ctx, const GradeCase& sync) {
  GradeCase async = sync;
  // With no rate limit: the limiter's waits free the parked buffers they pass (release_oldest_limited), which would
  // hide an ASYNC schedule that never releases the others.
  async.options = gpt2_124m(OverlapMode::async, "all", 0).options;
  async.options.param_dtype = sync.options.param_dtype;
  std::optional<CheckOutcome> failed;
  double fraction = 1;
  for (const GradeCase* c : std::initializer_list<const GradeCase*>{&sync, &async}) {
    const bool is_sync = c == &sync;
    const std::string mode = is_sync ? "SYNC" : "ASYNC";
    const std::string expected =
        mode + ": the third step's end holds what the second's held, tag by tag (the reference's: no tag grows)";
    const Schedules s = schedules(ctx, *c, expected);
    if (s.failed) return *s.failed;
    if (const std::optional<Growth> reference_growth = memory_growth(s.reference))
      throw Error("the reference's run of " + c->name + " grows " + std::string(mem_tag_name(reference_growth->tag)));
    const std::optional<Growth> growth = memory_growth(s.graded);
    if (!growth) continue;
    fraction -= 0.5;
    if (failed) continue;  // the first mode's diagnostic stands
    const std::string tag(mem_tag_name(growth->tag));
    const std::string method = releasing_method(growth->tag);
    const std::string who = method.empty() ? "a release method" : method;
    const std::string cause =
        is_sync ? who +
                      " parked what it frees under SYNC (parked.push), where nothing releases a parked buffer: "
                      "under SYNC free it at once (storage().free(); a staging tensor is freed by dropping it), "
                      "since the compute stream waited for its users"
                : who +
                      " parked a buffer that is never released: under ASYNC release_completed(device) (in "
                      "acquire_full, acquire_grad and end_backward) frees those whose last user is done";
    failed = CheckOutcome::fail(
        expected,
        "rank " + std::to_string(growth->rank) + "'s " + tag + " grew from " + megabytes(growth->second) +
            " at the second step's end to " + megabytes(growth->third) + " at the third's (" +
            c->command("run", ctx.impl_flag()) + "): a step leaves memory behind, and a long run runs out",
        cause);
    failed->show = c->command("gui", "{impl}");
  }
  if (!failed) return CheckOutcome::pass();
  failed->fraction = fraction;
  return *failed;
}

// ---- a prefetch never used ------------------------------------------------------------------------------

// [Note: a prefetch never used]
// A prefetch that after() names and the pass never runs again stays `gathering` when the backward ends: its gather
// still reads the unit's shard when the optimizer step writes it, and its buffer is never given back. end_backward
// refuses it (check_prefetches_used, UnusedPrefetch naming the unit). A correct after() never leaves one, so no
// training of the graded task shows whether end_backward would: StrayPrefetch runs the graded task with an after()
// that, at the last post-backward of a pass, names a unit the pass is done with. The run must stop at that pass's
// end with the UnusedPrefetch, as the reference's does.
class StrayPrefetch final : public ForwardingOverlap {
 public:
  using ForwardingOverlap::ForwardingOverlap;
  // The graded after(), but at the pass's last post-backward (the lifecycle counts them: post_backwards_seen is the
  // number done before this one), a unit already resharded.
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    FsdpUnit* next = task_.after(point, unit, rank);
    const OverlapState& s = rank.schedule;
    if (point != PassPoint::post_backward || s.post_backwards_seen + 1 != s.units.size()) return next;
    for (FsdpUnit* done : s.units)
      if (done != &unit && done->state == UnitState::sharded) return done;
    return next;
  }
};

// See [Note: a prefetch never used].
CheckOutcome unused_prefetch_refused(const CheckContext& ctx, const GradeCase& c) {
  const std::string expected =
      "the pass that prefetched a unit it never ran again stops at its end with an UnusedPrefetch naming the unit "
      "(the reference's run does)";
  FsdpTasks graded = ctx.tasks, reference = ctx.reference;
  const StrayPrefetch stray(*ctx.tasks.overlap), reference_stray(*ctx.reference.overlap);
  graded.overlap = &stray;
  reference.overlap = &reference_stray;
  const GradedRun reference_run = train_graded(c, reference, ctx.scratch, {.params = false});
  if (!reference_run.unused_prefetch)
    throw Error("the reference's run of " + c.name + " with a stray prefetch did not stop with an UnusedPrefetch: " +
                (reference_run.trained() ? std::string("it trained") : reference_run.error));
  const GradedRun run = train_graded(c, graded, ctx.scratch, {.params = false});
  if (run.unused_prefetch) return CheckOutcome::pass();
  const std::string let_through =
      "end_backward let a unit still `gathering` through: its gather then reads the shard the optimizer step writes, "
      "and its buffer is never given back; call check_prefetches_used(rank.schedule) there, which raises the "
      "UnusedPrefetch";
  CheckOutcome missed =
      run.trained()
          ? CheckOutcome::fail(expected, "the run trained to its end with the unit still gathering", let_through)
          : stopped_training(expected, run,
                             cause_of_training(run, let_through, "", [&] { return race_diagnosis(c, run); }));
  // Only the grader's stray after() makes such a prefetch: where the graded task trains the case clean without it, no
  // fsdplab command shows the failure.
  missed.unseen = train_graded(c, ctx.tasks, ctx.scratch, {.params = false}).trained();
  return missed;
}

}  // namespace

// ---- the catalog ------------------------------------------------------------------------------------------

std::vector<Check> overlap_checks() {
  const GradeCase sync = gpt2_124m(OverlapMode::sync, "none");
  const GradeCase forward = gpt2_124m(OverlapMode::async, "forward");
  const GradeCase backward = gpt2_124m(OverlapMode::async, "backward-pre");
  const GradeCase all = gpt2_124m(OverlapMode::async, "all");
  const GradeCase pool = gpt2_124m(OverlapMode::async, "backward-pre", 2, UnshardBuffers::pool);
  GradeCase numerics_sync = small_gpt2(3);
  numerics_sync.options = sync_schedule(numerics_sync.options);
  // Llama's Linears as units (--wrap linear): its MLP's backward runs down_proj, gate_proj, up_proj, not the forward's
  // order reversed, so the backward prefetch must skip the units whose backward has started (next_in_backward reads
  // backward_started) or it gathers a unit whose backward is done.
  GradeCase numerics_all = small_gpt2(2);
  numerics_all.options.prefetch = parse_prefetch("all");
  numerics_all.run.model = "llama";
  numerics_all.run.wrap = "linear";
  numerics_all.name = "llama test-tiny W2 linear";
  GradeCase numerics_pool = small_gpt2(2);
  numerics_pool.options.buffers = UnshardBuffers::pool;
  // no_shard keeps the whole gradient on every rank: grad_full is then the replica's gradient (grad_replica), which
  // acquire_grad must not allocate nor release_grad free.
  GradeCase numerics_replicated = small_gpt2(2);
  numerics_replicated.options.strategy = ShardingStrategy::no_shard;
  // SYNC with the replica's gradient: only release_grad's SYNC wait orders compute (the optimizer) after its
  // all-reduce, so an early return for the replica's gradient comes after that wait, not before it.
  GradeCase numerics_sync_replicated = numerics_replicated;
  numerics_sync_replicated.options = sync_schedule(numerics_sync_replicated.options);
  // CPU offload hands the overlap staging copies that cross streams: the shard copied up on the memcpy stream, read
  // by the gather; the reduced shard, copied down on the memcpy stream (release_staging).
  GradeCase numerics_offload = small_gpt2(2);
  numerics_offload.options.prefetch = parse_prefetch("all");
  numerics_offload.options.offload = true;
  // The ASYNC trainings' cause where one raced, as every training's; where one trained equal but slower or bigger, what
  // the schedule checks find first (each names its mistake: a prefetch declined, a host wait, a limiter off, a stream
  // wait beyond the reference's), not the budget's generic list.
  const std::vector<std::pair<ScheduleCheck, GradeCase>> schedule_checks = {
      {forward_gathers_overlap_compute, forward},
      {backward_collectives_overlap_compute, backward},
      {step_time_as_the_reference, all},
      {rate_limiter_bounds_gathered_units, all},
      {first_gather_waits_for_the_optimizer, all}};
  const DifferenceCause race_or_schedule = [schedule_checks](const CheckContext& ctx, const GradeCase& c,
                                                             const GradedRun& graded, const GradedRun&, double) {
    if (graded.race || !graded.trained()) return race_diagnosis(c, graded);
    for (const auto& [check, on] : schedule_checks)
      if (const CheckOutcome outcome = check(ctx, on); !outcome.passed())
        if (std::string mistake = named_mistake(outcome); !mistake.empty()) return mistake;
    return std::string();
  };
  return {
      make("sync-overlaps-nothing", "SYNC: no collective overlaps any compute op", 2, sync, sync_overlaps_nothing),
      make("forward-prefetch", "ASYNC, forward prefetch: each gather but the first overlaps the compute before it", 2,
           forward, forward_gathers_overlap_compute, Shown::whole_runs),
      make("backward-prefetch",
           "ASYNC, backward prefetch pre and post: backward gathers and reductions overlap compute", 2, backward,
           backward_pre_and_post_overlap_compute, Shown::whole_runs),
      make("step-time",
           "ASYNC step time within 1% of the reference's, at --max-inflight 2 and 0 (the host never waits where it "
           "need not)",
           2, all, step_time_as_the_reference, Shown::whole_runs),
      make("rate-limiter", "the rate limiter holds at most max_inflight gathered units (K = 1, 2)", 2, all,
           rate_limiter_bounds_gathered_units, Shown::whole_runs),
      make("gathers-after-optimizer", "each forward's first gather waits (by event) for the optimizer step before it",
           1, all, first_gather_waits_for_the_optimizer),
      make("pool", "the two-buffer pool: clean under the race detector, no more memory than the reference's", 1, pool,
           pool_clean_and_no_bigger),
      make("memory-released",
           "SYNC and ASYNC, bf16: each step leaves allocated what the step before left (nothing parked for good)", 1,
           four_steps_in_bf16(sync), memory_released, Shown::whole_runs),
      make("unused-prefetch",
           "end_backward refuses a prefetch its pass never used (a unit still gathering: UnusedPrefetch)", 1,
           numerics_all, unused_prefetch_refused),
      equivalence_check(
          6, "training-async", "ASYNC, prefetch all, llama --wrap linear, W=2: equals the single-rank baseline", 1,
          numerics_all, "a buffer freed before its last user, or a prefetch of the wrong unit", race_or_schedule),
      equivalence_check(6, "training-sync", "SYNC, W=3: equals the single-rank baseline", 1, numerics_sync,
                        "SYNC's orderings left out", diagnose_race),
      equivalence_check(6, "training-pool", "the two-buffer pool, W=2: equals the single-rank baseline", 1,
                        numerics_pool, "a pool slot overwritten while its previous unit is still read",
                        race_or_schedule),
      equivalence_check(6, "training-replicated",
                        "ASYNC no_shard, W=2: equals the single-rank baseline (the gradient is the replica's)", 1,
                        numerics_replicated, kReplicaGradientCause,
                        [race_or_schedule](const CheckContext& ctx, const GradeCase& c, const GradedRun& graded,
                                           const GradedRun& baseline, double tolerance) {
                          if (std::string replica = replica_gradient(graded); !replica.empty()) return replica;
                          return race_or_schedule(ctx, c, graded, baseline, tolerance);
                        }),
      equivalence_check(6, "training-sync-replicated",
                        "SYNC no_shard, W=2: equals the single-rank baseline (the optimizer waits for the all-reduce)",
                        1, numerics_sync_replicated,
                        "SYNC's wait for the gradient's reduction skipped for the replica's gradient (release_grad "
                        "returns for it before the wait)",
                        diagnose_race),
      equivalence_check(
          6, "training-offload", "ASYNC with CPU offload, W=2: equals the single-rank baseline (staging copies parked)",
          1, numerics_offload, "a staging copy freed before the collective or copy that reads it", race_or_schedule),
  };
}

}  // namespace fsdplab::grading
