// Task 5's checks: ShardedOptimizerTask (engine/fsdp/sharded_optimizer.hpp, labs/05-sharded-optimizer).
// Each method is called directly on the tensors the unit lifecycle would hand it, with the reference doing
// the other two, so a defect is charged to the method that has it: make's targets (names, order, the
// master and gradient shards themselves) and the optimizer state they imply (1/W of an unsharded AdamW's,
// read from the memory ledger beside the reference's and the formula); step's single update on the stream
// given; all_gather_updates' gathers (one per unit, on the all-gather stream, every rank's replica whole and
// updated after them) and their schedule read from the virtual clock (after the update, before the next
// forward, no host wait); clip_grad_norm's norm (the whole model's on every rank) and scale, on the device and under
// offload. Then three trainings against the single-rank baseline: zero2, full, and full with clipping.
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "engine/cuda/optimizer_kernels.hpp"
#include "engine/fsdp/sharding.hpp"
#include "grader/check_catalog.hpp"
#include "grader/diagnostic_text.hpp"
#include "grader/graded_run.hpp"
#include "grader/rank_harness.hpp"

namespace fsdplab::grading {
namespace {

constexpr const char* kShowFull = "fsdplab gui --model gpt2 --world 2 {impl} --compare impl --break task:5";
// Stopped once the first update gather is issued (collective done: the op drawn on its lane).
constexpr const char* kShowZero =
    "fsdplab gui --model gpt2 --world 2 --strategy zero2 {impl} --compare impl --break task:5:collective-done";

// Stopped at the optimizer step of a run that clips: the norm's all-reduce on the compute stream, before the updates.
constexpr const char* kShowClip =
    "fsdplab gui --model gpt2 --world 2 --optimizer sgd --lr 0.1 --clip-grad-norm 0.5 {impl} --compare impl --break "
    "task:5";

// Three units as a small model's: their names and this rank's shard elements (padded is W times that).
struct UnitSize {
  const char* name;
  std::int64_t shard;
};
constexpr UnitSize kUnits[] = {{"transformer.h.0", 24}, {"transformer.h.1", 20}, {"(root)", 12}};

// Element i of unit u's flat parameters before the step, and of its averaged gradient: multiples of 1/16 and
// of 1/4, so an SGD step of lr 0.25 is exact whatever the order of operations.
float initial_value(std::size_t u, std::int64_t i) {
  return static_cast<float>((i * 7 + static_cast<std::int64_t>(u) * 3) % 13 - 6) / 16;
}
float gradient_value(std::size_t u, std::int64_t i) {
  return static_cast<float>((i * 5 + static_cast<std::int64_t>(u)) % 9 - 4) / 4;
}
float after_sgd(std::size_t u, std::int64_t i) { return initial_value(u, i) - 0.25f * gradient_value(u, i); }

std::vector<float> values(float (*f)(std::size_t, std::int64_t), std::size_t u, std::int64_t begin,
                          std::int64_t count) {
  std::vector<float> out;
  for (std::int64_t i = begin; i < begin + count; ++i) out.push_back(f(u, i));
  return out;
}

// How the lifecycle lays a unit out for task 5 (fully_sharded_model.cpp): the shard alone (full), in host
// memory under --offload; or, under zero1/zero2, the whole f32 parameters with master a view of chunk r.
enum class Form { full, offload, zero };

// One rank's units, as the lifecycle hands them to task 5, holding initial_value and gradient_value.
struct RankUnits {
  RankUnits(Device& device, int rank, int world, Form form) {
    const Lane lane = form == Form::offload ? Lane::host : Lane::compute;
    for (std::size_t u = 0; u < std::size(kUnits); ++u) {
      const std::string name = kUnits[u].name;
      const std::int64_t n = kUnits[u].shard;
      UnitShards unit{name, {}, {}, {}};
      if (form == Form::zero) {
        unit.replica = Tensor::empty(device, {n * world}, DType::f32, MemTag::param_full, name + ".flat_param");
        unit.replica.copy_from(values(initial_value, u, 0, n * world));
        unit.master = unit.replica.view(rank * n, {n});
      } else {
        unit.master = Tensor::empty(device, {n}, DType::f32, MemTag::param_shard, name + ".flat_param_shard", lane);
        unit.master.copy_from(values(initial_value, u, rank * n, n));
      }
      unit.grad_shard = Tensor::empty(device, {n}, DType::f32, MemTag::grad_shard, name + ".flat_grad_shard", lane);
      unit.grad_shard.copy_from(values(gradient_value, u, rank * n, n));
      units.push_back(std::move(unit));
    }
  }
  std::int64_t shard_elements() const {
    std::int64_t n = 0;
    for (const UnitShards& u : units) n += u.master.numel();
    return n;
  }
  std::vector<UnitShards> units;
};

const ShardedOptimizerTask& graded(const CheckContext& c) { return *c.tasks.optimizer; }
const ShardedOptimizerTask& reference(const CheckContext& c) { return *c.reference.optimizer; }

bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.storage_ptr() == b.storage_ptr() && a.offset() == b.offset() &&
         a.shape() == b.shape();
}

std::string hyper_text(const Optimizer& o) {
  std::string s(o.name());
  for (const auto& [name, value] : o.hyper_parameters()) {
    std::ostringstream v;
    v << value;
    s += " " + name + "=" + v.str();
  }
  return s;
}

Check make(std::string id, std::string title, int points, const char* show,
           std::function<CheckOutcome(const CheckContext&)> run) {
  return {5, std::move(id), std::move(title), points, show, std::move(run)};
}

// ---- make ------------------------------------------------------------------------------------------

// make over one rank's units of `form` (full: master and grad_shard; zero: a replica beside them).
CheckOutcome targets_in(const CheckContext& c, Form form) {
  auto device = make_graded_device(1);
  const RankUnits mine(*device, 1, 2, form), theirs(*device, 1, 2, form);
  const OptimizerSpec spec{"sgd", 0.25, 0.9};
  const std::unique_ptr<Optimizer> wanted = reference(c).make(theirs.units, spec);
  const std::string expected = "one target per unit in the units' order, each named as its unit, updating its master "
                               "from its grad_shard, with the optimizer the spec names (" + hyper_text(*wanted) + ")";
  std::unique_ptr<Optimizer> optimizer;
  const std::string refused = error_raised([&] { optimizer = graded(c).make(mine.units, spec); });
  if (!refused.empty() && form == Form::zero)
    return CheckOutcome::fail(expected, "make raised on zero2's units: " + refused,
                              "the optimizer given the whole replica with the gradient shard: under zero1 and zero2, "
                              "as under full sharding, it updates the master shard (this rank's view of the replica), "
                              "and the gathers then fill the replica from every rank's master");
  if (!refused.empty())
    return CheckOutcome::fail(expected, "make raised on full sharding's units: " + refused,
                              "a target that is not the unit's master shard: under full sharding a unit has no "
                              "replica (only zero1 and zero2 keep one), and the optimizer updates the master");
  if (!optimizer)
    return CheckOutcome::fail(expected, "make returned no optimizer", "make must return make_optimizer's result");
  const std::vector<OptimTarget>& targets = optimizer->targets();
  if (targets.size() != mine.units.size())
    return CheckOutcome::fail(
        expected, std::to_string(targets.size()) + " targets for " + std::to_string(mine.units.size()) + " units",
        "one OptimTarget per unit: the unit's master and grad_shard, nothing split or added");
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const OptimTarget& t = targets[i];
    const UnitShards& u = mine.units[i];
    const std::string which = "target " + std::to_string(i) + " ('" + t.name + "')";
    if (t.name != u.name)
      return CheckOutcome::fail(expected, which + " where unit " + std::to_string(i) + " is '" + u.name + "'",
                                "targets not named as the units, or not in their order: checkpoints call the state "
                                "optim.<unit>.exp_avg, and a resumed run finds it by name and position");
    if (!same_tensor(t.param, u.master))
      return CheckOutcome::fail(expected, which + " updates " + (t.param.defined() ? t.param.describe() : "nothing") +
                                              ", not the unit's master " + u.master.describe(),
                                same_tensor(t.param, u.grad_shard) ? "parameter and gradient swapped in the OptimTarget"
                                : t.param.defined() && t.param.numel() == u.master.numel()
                                    ? "a copy of master: the update never reaches the parameters the next gather reads"
                                    : "the optimizer given something else than the master shard");
    if (!same_tensor(t.grad, u.grad_shard))
      return CheckOutcome::fail(
          expected,
          which + " reads the gradient " + (t.grad.defined() ? t.grad.describe() : "nothing") +
              ", not the unit's grad_shard " + u.grad_shard.describe(),
          "the optimizer not given the unit's grad_shard (task 4's averaged chunk) as the gradient");
  }
  if (hyper_text(*optimizer) != hyper_text(*wanted))
    return CheckOutcome::fail(expected, "the optimizer made is " + hyper_text(*optimizer),
                              "the spec not passed on to make_optimizer as given (--optimizer, --lr, --momentum)");
  return CheckOutcome::pass();
}

// Full sharding's units and ZeRO's (a replica beside each master), half the check each: a make that reaches for the
// replica where there is one is wrong only in the second.
CheckOutcome check_targets(const CheckContext& c) {
  CheckOutcome full = targets_in(c, Form::full), zero = targets_in(c, Form::zero);
  if (!full.passed()) {
    full.fraction = zero.passed() ? 0.5 : 0;
    return full;
  }
  if (!zero.passed()) {
    zero.expected = "under zero2 too: " + zero.expected;
    zero.fraction = 0.5;
    zero.show = kShowZero;
  }
  return zero;
}

// The optim_state bytes a rank holds once an optimizer `task` made over `form`'s units at W = `world` has
// made one step (the reference's), or make's refusal.
struct StateBytes {
  std::int64_t bytes = 0;
  std::int64_t shard_elements = 0;
  std::string refused;
};

StateBytes state_bytes(const ShardedOptimizerTask& task, const ShardedOptimizerTask& stepper, Form form, int world) {
  auto device = make_graded_device(1);
  const RankUnits mine(*device, 1, world, form);
  std::unique_ptr<Optimizer> optimizer;
  StateBytes out;
  out.shard_elements = mine.shard_elements();
  out.refused = error_raised([&] { optimizer = task.make(mine.units, {"adamw", 1e-3, 0}); });
  if (!out.refused.empty()) return out;
  stepper.step(*optimizer, device->stream(Lane::compute));
  device->synchronize();
  out.bytes = device->ledger().live(MemTag::optim_state);
  return out;
}

CheckOutcome check_state_sharded(const CheckContext& c) {
  constexpr int kWorld = 4;
  std::vector<BudgetLine> budget;
  for (const Form form : {Form::zero, Form::full}) {
    const std::string where = form == Form::zero ? "zero2" : "full";
    const StateBytes got = state_bytes(graded(c), reference(c), form, kWorld);
    const StateBytes want = state_bytes(reference(c), reference(c), form, kWorld);
    const std::int64_t formula = 2 * 4 * want.shard_elements;  // AdamW's exp_avg and exp_avg_sq, f32
    std::ostringstream expected;
    expected << "AdamW's optim_state = 2 x 4 B x " << want.shard_elements << " shard elements = " << formula
             << " B on each of W = " << kWorld << " ranks under " << where << ": 1/" << kWorld << " of the "
             << formula * kWorld << " B an unsharded AdamW holds";
    if (!got.refused.empty())
      return CheckOutcome::fail(
          expected.str(), "make refused the " + where + " units: " + got.refused,
          "the optimizer given a target bigger than the shard (the whole `replica` under zero1/zero2) "
          "with the gradient shard: it must see master and grad_shard, nothing bigger");
    budget.push_back({"optim_state (" + where + ", W = 4)", static_cast<double>(got.bytes) / 1e3,
                      static_cast<double>(want.bytes) / 1e3, "kB"});
    if (got.bytes != formula) {
      CheckOutcome outcome =
          CheckOutcome::fail(expected.str(), std::to_string(got.bytes) + " B of optim_state on a rank under " + where,
                             got.bytes >= formula * kWorld
                                 ? "the state sized to the whole parameters: the optimizer was given the replica, "
                                   "not the master shard"
                                 : "the optimizer given other tensors than each unit's master and grad_shard");
      outcome.budget = std::move(budget);
      return outcome;
    }
  }
  CheckOutcome outcome = CheckOutcome::pass();
  outcome.budget = std::move(budget);
  return outcome;
}

// ---- step ------------------------------------------------------------------------------------------

// Two calls of `task.step` on the stream of `lane` with the reference's optimizer over `form`'s units: the
// masters after, the steps the optimizer counted and the update ops issued; or the error the calls raised.
struct Stepped {
  std::vector<std::vector<float>> masters;
  std::int64_t steps = 0;
  std::vector<OpRecord> updates;
  std::string refused;
};

Stepped step_twice(const ShardedOptimizerTask& task, const ShardedOptimizerTask& maker, Form form, Lane lane) {
  auto device = make_graded_device(0);
  const RankUnits mine(*device, 0, 2, form);
  const std::unique_ptr<Optimizer> optimizer = maker.make(mine.units, {"adamw", 1e-2, 0});
  const std::size_t first = device->ops().size();
  Stepped out;
  out.refused = error_raised([&] {
    task.step(*optimizer, device->stream(lane));
    task.step(*optimizer, device->stream(lane));
  });
  device->synchronize();
  out.steps = optimizer->steps();
  out.updates = ops_since(*device, first);
  for (const UnitShards& u : mine.units) out.masters.push_back(u.master.to_vector());
  return out;
}

// What differs between two calls' worth of `got` and of `want` in the steps counted and the ops issued, as the
// likely mistake; "" when neither does. Steps counted right with other ops: ops besides the optimizer's in step.
std::string step_count_mistake(const Stepped& got, const Stepped& want) {
  if (got.steps != want.steps)
    return "optimizer.step called " + std::string(got.steps > want.steps ? "more" : "less") +
           " than once per call: " + std::to_string(got.steps) + " steps counted after 2 calls, the reference's " +
           std::to_string(want.steps) +
           "; a second call doubles the update (SGD's too) and advances AdamW's step count, its bias correction, "
           "twice";
  if (got.updates.size() == want.updates.size()) return "";
  std::set<std::string> wanted;
  for (const OpRecord& op : want.updates) wanted.insert(op.name);
  for (const OpRecord& op : got.updates)
    if (!wanted.contains(op.name))
      return "an op besides the optimizer's issued in step ('" + op.name +
             "'): step calls optimizer.step(stream) once and nothing else (the optimizer orders each unit's update "
             "after its own gradient; the gradients are the engine's to zero and scale)";
  return std::string(got.updates.size() > want.updates.size() ? "more" : "fewer") + " update ops than the " +
         "optimizer's own (" + std::to_string(got.updates.size()) + " against " + std::to_string(want.updates.size()) +
         " in 2 calls): step calls optimizer.step(stream) once, as it is; the order of the updates "
         "(order_next_step) is the engine's, which has told the optimizer each unit's gradient wait";
}

// The mistake in how often step updates, as the one-update check finds it: "" when step updates once per call.
std::string update_count_mistake(const CheckContext& c) {
  const Stepped got = step_twice(graded(c), reference(c), Form::full, Lane::compute);
  const Stepped want = step_twice(reference(c), reference(c), Form::full, Lane::compute);
  if (!got.refused.empty()) return "";
  const std::string mistake = step_count_mistake(got, want);
  return mistake.empty() ? "" : mistake + " (see the one-update check)";
}

CheckOutcome check_one_update(const CheckContext& c) {
  for (const auto& [form, lane] : {std::pair{Form::full, Lane::compute}, std::pair{Form::offload, Lane::host}}) {
    const std::string given = lane == Lane::host ? "the host lane (--offload's CPU step)" : "the compute stream";
    const Stepped got = step_twice(graded(c), reference(c), form, lane);
    const Stepped want = step_twice(reference(c), reference(c), form, lane);
    // The reference's counts, as the comparison below uses them (AdamW updates every target in one op).
    const std::string expected =
        "each call: one update of every target, on the stream given, the step counted once: "
        "after 2 calls on " +
        given + ", " + std::to_string(want.steps) + " steps, " + std::to_string(want.updates.size()) +
        " update ops and the values, as the reference's";
    if (!got.refused.empty())
      return CheckOutcome::fail(expected, "step on " + given + " raised: " + got.refused,
                                "the update not issued on the stream step is given");
    if (const std::string mistake = step_count_mistake(got, want); !mistake.empty())
      return CheckOutcome::fail(expected,
                                "after 2 calls of step on " + given + " the optimizer counts " +
                                    std::to_string(got.steps) + " steps and " + std::to_string(got.updates.size()) +
                                    " ops were issued",
                                mistake);
    for (const OpRecord& op : got.updates)
      if (op.lane != lane)
        return CheckOutcome::fail(
            expected,
            "'" + op.name + "' ran on the " + std::string(lane_name(op.lane)) + " stream; step was given " + given,
            "the update issued on another stream than the one given: the engine passes the compute "
            "stream, or the host lane under --offload");
    for (std::size_t u = 0; u < got.masters.size(); ++u)
      if (got.masters[u] != want.masters[u])
        return CheckOutcome::fail(expected,
                                  "unit '" + std::string(kUnits[u].name) + "''s master after 2 calls on " + given +
                                      " differs from the reference's",
                                  "step does something else than optimizer.step(stream) once");
  }
  return CheckOutcome::pass();
}

// ---- all_gather_updates ----------------------------------------------------------------------------

// After the reference's SGD step (lr 0.25) and `task`'s all_gather_updates on rank r of `world`, what is
// wrong with r's gathers or replicas; "" when nothing.
struct GatherProblem {
  std::string got;
  std::string cause;
  double fraction = 0;  // of the check's points a problem of cost alone keeps
};

GatherProblem gathered_problem(const std::vector<OpRecord>& ops, std::size_t first, const RankUnits& mine, int rank,
                               int world) {
  std::vector<const OpRecord*> gathers;
  std::map<std::string_view, int> collectives;  // by kind, gathers included
  for (std::size_t i = first; i < ops.size(); ++i) {
    if (is_communication(ops[i].category)) ++collectives[category_name(ops[i].category)];
    if (ops[i].category == OpCategory::all_gather) gathers.push_back(&ops[i]);
  }
  const std::string who = "rank " + std::to_string(rank);
  if (collectives.empty())
    return {who + " issued no collective, and its replicas hold the other ranks' chunks as they were before the step",
            "the updated chunks are never gathered: each rank trains its own copy, whose chunks other than its own "
            "never change (the loss drifts from step 2)"};
  if (gathers.size() != mine.units.size() || collectives.size() != 1) {
    std::string issued;
    for (const auto& [kind, count] : collectives)
      issued += (issued.empty() ? "" : ", ") + std::to_string(count) + " " + std::string(kind);
    return {who + " issued " + issued + " for " + std::to_string(mine.units.size()) + " units",
            "one all-gather per unit, of its master into its replica, and no other collective: the all-gather moves "
            "what W broadcasts would, in one collective, and any collective more is link time the step pays"};
  }
  for (const OpRecord* op : gathers)
    if (op->lane != Lane::all_gather)
      return {
          who + "'s '" + op->name + "' ran on the " + std::string(lane_name(op->lane)) + " stream",
          "the gathers on another stream than the all-gather stream: right values, but nothing overlaps them and the "
          "all_gather lane stays empty after the step"};
  for (std::size_t u = 0; u < mine.units.size(); ++u) {
    const std::vector<float> replica = mine.units[u].replica.to_vector();
    const std::int64_t n = kUnits[u].shard;
    for (std::int64_t i = 0; i < n * world; ++i) {
      if (replica[static_cast<std::size_t>(i)] == after_sgd(u, i)) continue;
      const bool stale = replica[static_cast<std::size_t>(i)] == initial_value(u, i);
      std::ostringstream got;
      got << who << "'s replica of '" << kUnits[u].name << "' holds " << replica[static_cast<std::size_t>(i)]
          << " at element " << i << " (chunk " << i / n << "), expected the updated " << after_sgd(u, i)
          << (stale ? ", the value before the step" : "");
      return {got.str(),
              "each unit's master (chunk group.rank() of the replica) must be all-gathered into its replica, "
              "over the group given"};
    }
  }
  // The replicas are right: what else was issued costs memory and a pass over each unit.
  for (std::size_t i = first; i < ops.size(); ++i)
    if (!is_communication(ops[i].category))
      return {who + " issued '" + ops[i].name + "' (" + std::string(category_name(ops[i].category)) + ", on the " +
                  std::string(lane_name(ops[i].lane)) + " stream) besides its gathers",
              "the gather writes the replica in place (group.all_gather(stream, unit.master, unit.replica): master is "
              "chunk group.rank() of replica, which a collective allows); a gather into a buffer of its own and a "
              "copy into the replica hold a whole unit's memory more and add a pass over it",
              0.5};
  return {};
}

CheckOutcome check_zero_gather(const CheckContext& c) {
  constexpr int kWorld = 3;
  std::vector<GatherProblem> problems(kWorld);  // each rank writes its own
  on_ranks(kWorld, [&](GradedRank& r) {
    const RankUnits mine(r.device, r.rank, r.world, Form::zero);
    const std::unique_ptr<Optimizer> optimizer = reference(c).make(mine.units, {"sgd", 0.25, 0});
    reference(c).step(*optimizer, r.device.stream(Lane::compute));
    // The update done before the call: this check sees the gathers alone (their order is gather-schedule's).
    r.device.synchronize();
    const std::size_t first = r.device.ops().size();
    graded(c).all_gather_updates(r.device, r.comm, mine.units);
    r.device.synchronize();
    problems[static_cast<std::size_t>(r.rank)] = gathered_problem(r.device.ops(), first, mine, r.rank, r.world);
  });
  for (const GatherProblem& p : problems)
    if (!p.got.empty())
      return CheckOutcome::fail(
          "on each of 3 ranks (zero2, one SGD step): one all_gather per unit on the all-gather stream, "
          "and every replica whole and updated, equal on every rank, and nothing else issued",
          p.got, p.cause, p.fraction);
  return CheckOutcome::pass();
}

// What rank 0 of 2 shows around all_gather_updates, issued behind 1 ms of update on the compute stream (and 0.5 ms of
// work on every other stream, so that a host sync of any stream shows on the host clock) and followed by the next
// forward's first op there. An event the first gather waits for carries the last op of the stream it was recorded on,
// which the gather's dependencies then name.
struct GatherSchedule {
  SimTime update_end = 0;
  SimTime others_end = 0;  // when the first of the other streams' work ends
  std::vector<OpRecord> gathers;
  std::set<Lane> first_gather_waited_for;  // the streams whose earlier work the first gather waited for by event
  OpRecord next_forward;
  SimTime host_before = 0, host_after = 0;
};

GatherSchedule observe_gather_schedule(const CheckContext& c) {
  GatherSchedule out;
  on_ranks(2, [&](GradedRank& r) {
    const RankUnits mine(r.device, r.rank, r.world, Form::zero);
    const OpRecord update = busy_op(r.device, Lane::compute, OpCategory::compute, "the optimizer's update", 1'000'000);
    std::vector<OpRecord> issued = {update};
    for (const Lane lane : {Lane::all_gather, Lane::reduce_scatter, Lane::memcpy})
      issued.push_back(busy_op(r.device, lane, OpCategory::compute, "work already issued", 500'000));
    // The first to end: a host sync of any one stream reaches at least that.
    out.others_end = issued[1].end;
    const SimTime host_before = r.device.host_time();
    const std::size_t first = r.device.ops().size();
    graded(c).all_gather_updates(r.device, r.comm, mine.units);
    const SimTime host_after = r.device.host_time();
    const std::size_t last = r.device.ops().size();
    busy_op(r.device, Lane::compute, OpCategory::compute, "the next forward", 10'000);
    r.device.synchronize();  // before the units' tensors go
    if (r.rank != 0) return;
    const std::vector<OpRecord>& ops = r.device.ops();
    out.update_end = update.end;
    for (std::size_t i = first; i < last; ++i)
      if (is_communication(ops[i].category)) out.gathers.push_back(ops[i]);  // the gathers, or what stands for them
    if (!out.gathers.empty()) out.first_gather_waited_for = lanes_waited_for(out.gathers.front(), issued);
    out.next_forward = ops[last];
    out.host_before = host_before;
    out.host_after = host_after;
  });
  return out;
}

CheckOutcome check_gather_schedule(const CheckContext& c) {
  const GatherSchedule s = observe_gather_schedule(c);
  const std::string expected =
      "called on rank 0 of 2 behind 1 ms of update on the compute stream (a schedule of the check's own: the times "
      "below are its, not a training's): the gathers start after the update, the next forward starts after the last "
      "gather, and the host never waits (events only)";
  if (s.gathers.empty())
    return CheckOutcome::fail(expected, "no collective issued",
                              "all_gather_updates gathers nothing: there is no schedule to check");
  SimTime gathers_end = 0;
  for (const OpRecord& op : s.gathers) gathers_end = std::max(gathers_end, op.end);
  const OpRecord& first = s.gathers.front();
  std::vector<std::pair<std::string, std::string>> failed;  // got, cause
  if (first.begin < s.update_end)
    failed.emplace_back(
        "the first gather '" + first.name + "' starts at " + ms(first.begin) + ", before the update ends at " +
            ms(s.update_end),
        s.first_gather_waited_for.empty()
            ? "no event from the compute stream to the all-gather stream before the gathers: they may read chunks the "
              "update is still writing (record on compute, wait on all_gather)"
            : "the gathers wait for an event recorded on the " +
                  std::string(lane_name(*s.first_gather_waited_for.begin())) +
                  " stream, which orders nothing against the update: they may read chunks the update is still "
                  "writing (record on compute, where the update runs, then wait on all_gather)");
  if (s.next_forward.begin < gathers_end)
    failed.emplace_back(
        "the next forward starts at " + ms(s.next_forward.begin) + ", before the gathers end at " + ms(gathers_end),
        "the compute stream is not made to wait for the gathers: the next forward may read a replica still "
        "being written (record on all_gather after them, wait on compute); the trainer's end-of-step host "
        "sync hides it in fsdplab run, but the contract requires the event");
  if (s.host_after >= s.others_end)
    failed.emplace_back(
        "the host clock went from " + ms(s.host_before) + " to " + ms(s.host_after) +
            " inside all_gather_updates (the first of the other streams' work ends at " + ms(s.others_end) +
            ", the update at " + ms(s.update_end) + ", the gathers at " + ms(gathers_end) + ")",
        "a host wait (device.synchronize) where events suffice: the host stops running ahead of the device "
        "and nothing it issues next can overlap");
  if (failed.empty()) return CheckOutcome::pass();
  CheckOutcome outcome = CheckOutcome::from_parts(expected, failed, 3);
  // Only gathers that race the update show in a training (the race detector stops it); a missing wait for the
  // gathers and a host wait are hidden there by the trainer's end-of-step host sync, so the check's command would
  // draw the reference's picture.
  outcome.unseen = first.begin >= s.update_end;
  return outcome;
}

// ---- clip_grad_norm ------------------------------------------------------------------------------------

// What `task`'s clip_grad_norm leaves on each rank of `world` (units of `form`, gradients gradient_value, max_norm a
// quarter of the whole model's norm), and the ops it issued.
struct Clipped {
  std::string refused;
  std::vector<float> squared_norm;                     // per rank
  std::vector<std::vector<std::vector<float>>> grads;  // per rank, per unit
  std::vector<std::string> off_stream;                 // per rank: an op on another lane than the one given, or ""
};

// The squares of the gradient elements ranks first_rank .. first_rank + ranks - 1 hold ((0, W): the whole model's
// squared norm), summed exactly: every gradient_value is a multiple of 1/4 up to 1, so each square is a multiple of
// 1/16 and any order of f32 sums of so few is exact.
float gradient_squares(int first_rank, int ranks) {
  double total = 0;
  for (std::size_t u = 0; u < std::size(kUnits); ++u)
    for (std::int64_t i = first_rank * kUnits[u].shard; i < (first_rank + ranks) * kUnits[u].shard; ++i)
      total += gradient_value(u, i) * gradient_value(u, i);
  return static_cast<float>(total);
}

Clipped clip_on_ranks(const ShardedOptimizerTask& task, int world, Form form, double max_norm) {
  Clipped out;
  out.squared_norm.assign(static_cast<std::size_t>(world), std::nanf(""));
  out.grads.resize(static_cast<std::size_t>(world));
  out.off_stream.resize(static_cast<std::size_t>(world));
  std::vector<std::string> refused(static_cast<std::size_t>(world));
  on_ranks(world, [&](GradedRank& r) {
    const auto me = static_cast<std::size_t>(r.rank);
    const RankUnits mine(r.device, r.rank, r.world, form);
    const Lane lane = form == Form::offload ? Lane::host : Lane::compute;
    const Tensor squared_norm = Tensor::empty(r.device, {1}, DType::f32, MemTag::workspace, "squared norm", lane);
    r.device.synchronize();
    const std::size_t first = r.device.ops().size();
    refused[me] =
        error_raised([&] { task.clip_grad_norm(r.comm, mine.units, max_norm, squared_norm, r.device.stream(lane)); });
    r.device.synchronize();
    if (!refused[me].empty()) return;
    out.squared_norm[me] = squared_norm.to_vector()[0];
    for (const UnitShards& unit : mine.units) out.grads[me].push_back(unit.grad_shard.to_vector());
    // Under offload the norm's crossing to the device and its all-reduce run on the compute stream: no collective
    // runs on the host lane.
    for (std::size_t i = first; i < r.device.ops().size(); ++i) {
      const OpRecord& op = r.device.ops()[i];
      const bool crossing = form == Form::offload && op.lane == Lane::compute &&
                            (is_communication(op.category) || op.name.starts_with("copy_to_"));
      if (op.lane != lane && !crossing && out.off_stream[me].empty())
        out.off_stream[me] = "'" + op.name + "' on the " + std::string(lane_name(op.lane)) + " stream";
    }
  });
  for (const std::string& e : refused)
    if (!e.empty()) out.refused = e;
  return out;
}

CheckOutcome check_clip_grad_norm(const CheckContext& c) {
  struct Variant {
    const char* where;
    int world;
    Form form;
  };
  for (const Variant v :
       {Variant{"3 ranks", 3, Form::full}, Variant{"2 ranks under --offload (the host lane)", 2, Form::offload}}) {
    const float want_squared = gradient_squares(0, v.world);
    const double max_norm = std::sqrt(static_cast<double>(want_squared)) / 4;
    const float coef = clip_coefficient(want_squared, static_cast<float>(max_norm));
    const std::string expected = std::string("on ") + v.where + ", gradients whose whole 2-norm is " +
                                 number(std::sqrt(want_squared)) + ", max_norm " + number(max_norm) +
                                 ": every rank's squared_norm " + number(want_squared) +
                                 " (the model's, summed over the shard group) and every gradient element times " +
                                 number(coef) + " (min(max_norm / (norm + 1e-6), 1)), on the stream given";
    const Clipped got = clip_on_ranks(graded(c), v.world, v.form, max_norm);
    if (!got.refused.empty())
      return CheckOutcome::fail(expected, "clip_grad_norm raised: " + got.refused,
                                v.form == Form::offload
                                    ? "under --offload the stream is the host lane, where no collective runs: the sum "
                                      "goes to the device (copy_to_device), is all-reduced on the compute stream and "
                                      "comes back (copy_to_host), the host waiting for it before its next op"
                                    : "clip_grad_norm stopped with an error where the reference clips");
    for (int r = 0; r < v.world; ++r) {
      const float mine = got.squared_norm[static_cast<std::size_t>(r)];
      if (mine == want_squared) continue;
      // This rank's own shards' squares: what a rank that never adds the others' gets.
      const float own = gradient_squares(r, 1);
      std::string cause =
          "the squared norm must be the whole model's: each rank sums the squares of its own shards, and the shard "
          "group adds the ranks' sums (group.all_reduce(stream, t, ReduceOp::sum))";
      // The squares of the gradients as the call left them, over every rank: a norm taken after some scaling.
      double after = 0;
      for (const auto& rank_grads : got.grads)
        for (const std::vector<float>& g : rank_grads)
          for (float x : g) after += static_cast<double>(x) * x;
      if (mine == own)
        cause =
            "the norm of this rank's shards alone, never added over the group: each rank then scales its shards "
            "by its own factor, as if each trained another model";
      else if (std::abs(mine - after) <= 1e-5 * after)
        cause =
            "squared_norm holds the gradients' norm after they were scaled, each by another factor than the "
            "model's norm gives: a norm per unit, each unit clipped by its own (clip_grad_norm_ takes one norm "
            "over every unit, before any scaling)";
      else if (std::abs(mine * v.world - want_squared) <= 1e-6f * want_squared)
        cause =
            "the ranks' sums of squares averaged (ReduceOp::avg, as the gradients are) instead of added: the norm "
            "comes out 1/sqrt(S) of the model's, and clipping starts late";
      return CheckOutcome::fail(expected,
                                "rank " + std::to_string(r) + "'s squared_norm is " + number(mine) +
                                    (std::isnan(mine) ? " (never written)" : ""),
                                cause);
    }
    for (int r = 0; r < v.world; ++r)
      for (std::size_t u = 0; u < std::size(kUnits); ++u) {
        const std::vector<float>& g = got.grads[static_cast<std::size_t>(r)][u];
        for (std::int64_t i = 0; i < kUnits[u].shard; ++i) {
          const float before = gradient_value(u, r * kUnits[u].shard + i);
          const float want = before * coef;
          const float seen = g[static_cast<std::size_t>(i)];
          if (seen == want) continue;
          return CheckOutcome::fail(
              expected,
              "rank " + std::to_string(r) + "'s gradient of unit '" + kUnits[u].name + "' holds " + number(seen) +
                  " at element " + std::to_string(i) + " (before: " + number(before) + "), expected " + number(want),
              seen == before ? "the gradient shards are not scaled (clip_grad_with_norm on every unit's grad_shard)"
                             : "the gradient scaled by another factor than the whole model's norm gives: each unit "
                               "clipped by its own norm, or the scale computed otherwise than clip_grad_with_norm's");
        }
      }
    for (int r = 0; r < v.world; ++r)
      if (const std::string& off = got.off_stream[static_cast<std::size_t>(r)]; !off.empty())
        return CheckOutcome::fail(expected, "rank " + std::to_string(r) + " issued " + off,
                                  "the clipping's ops go on the stream given (compute, or the host lane under "
                                  "--offload), where step() then reads the scaled gradients in order",
                                  0.5);
  }
  return CheckOutcome::pass();
}

GradeCase clipped_case() {
  GradeCase c = small_gpt2(3);
  c.run.optimizer = "sgd";
  c.run.lr = 0.1;
  c.run.clip_grad_norm = 0.5;  // test-tiny's gradient is near 1.3: every step clips
  return c;
}

GradeCase zero2_case() {
  GradeCase c = small_gpt2(2);
  c.options.strategy = ShardingStrategy::zero2;
  return c;
}

// A training's cause, from what make, step and all_gather_updates do on units of the training's own form: a target
// that is not the master shard (the targets check's cause), an update more or less than once a step (the one-update
// check's), or, where the ZeRO run raced, gathers not ordered after the update (the gather-schedule check's).
std::string make_or_step_mistake(const CheckContext& c, const GradeCase& run, const GradedRun& graded, const GradedRun&,
                                 double) {
  const Form form = parameters_replicated(run.options.strategy) ? Form::zero : Form::full;
  if (const CheckOutcome targets = targets_in(c, form); !targets.passed()) return targets.cause;
  if (std::string count = update_count_mistake(c); !count.empty()) return count;
  if (form == Form::zero && graded.race)
    if (const CheckOutcome schedule = check_gather_schedule(c); !schedule.passed()) return schedule.cause;
  return "";
}

GradeCase sgd_full_case() {
  GradeCase c = small_gpt2(3);
  c.run.optimizer = "sgd";
  c.run.lr = 0.1;
  return c;
}

}  // namespace

std::vector<Check> sharded_optimizer_checks() {
  return {
      make("targets",
           "make: one target per unit, in order, named as the unit, updating its master from its grad_shard (full, "
           "zero2)",
           2, kShowFull, check_targets),
      make("state-sharded", "the optimizer state is 1/W of an unsharded AdamW's (ledger, reference, formula)", 2,
           kShowZero, check_state_sharded),
      make("one-update", "step: exactly one update of every target per call, on the stream given (compute, host)", 2,
           kShowFull, check_one_update),
      make("zero-gather", "zero2: one gather per unit on the all-gather stream; every replica whole and updated", 2,
           kShowZero, check_zero_gather),
      make("gather-schedule", "zero2: gathers after the update, the next forward after the gathers, no host wait", 3,
           kShowZero, check_gather_schedule),
      equivalence_check(5, "training-zero2",
                        "gpt2 test-tiny, zero2 on 2 ranks, trains equal to the single-rank baseline", 2, zero2_case(),
                        "the updated chunks not gathered into every rank's replica, or gathered before the update is "
                        "done, or the optimizer given the replica",
                        make_or_step_mistake),
      equivalence_check(5, "training-W3-sgd",
                        "gpt2 test-tiny on 3 ranks, SGD, trains equal to the single-rank baseline", 1, sgd_full_case(),
                        "more or less than one update per step, or targets other than the shards",
                        make_or_step_mistake),
      make("clip-grad-norm",
           "clip_grad_norm: the whole model's squared norm on every rank, every gradient shard scaled by its "
           "coefficient (3 ranks; 2 under --offload)",
           2, kShowClip, check_clip_grad_norm),
      equivalence_check(5, "training-clipped",
                        "gpt2 test-tiny on 3 ranks, SGD clipped to norm 0.5, trains equal to the clipped baseline", 1,
                        clipped_case(), "a norm other than the whole model's, or gradients scaled otherwise",
                        first_failing_cause({check_clip_grad_norm})),
  };
}

}  // namespace fsdplab::grading
