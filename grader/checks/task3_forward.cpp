// Task 3's checks: ForwardTask (engine/fsdp/forward_task.hpp, labs/03-forward).
// Direct calls on W ranks ask what a whole training cannot: which values the gather leaves in the full
// buffer, which stream it ran on and where its event was recorded (the op graph), whether the compute
// stream is ordered after it (the race detector names both ops of a missing wait), whether the host waited
// (its virtual clock jumps to the gather's end), and what reshard_after_forward answers for the root and
// each strategy. Then trainings of gpt2, beside the reference's: the peak param_full and the number of
// gathers (what reshard_after_forward costs or saves), the ASYNC schedule (no gather on the compute stream,
// the virtual time of the steps), and the losses and final parameters of the single-rank baseline at
// W = 1, 2, 3, 4 and 8.
#include <algorithm>
#include <sstream>

#include "engine/runtime/race_detector.hpp"
#include "engine/tensor/elementwise.hpp"
#include "grader/check_catalog.hpp"
#include "grader/diagnostic_text.hpp"
#include "grader/graded_run.hpp"
#include "grader/rank_harness.hpp"

namespace fsdplab::grading {
namespace {

constexpr const char* kShow =
    "fsdplab gui --model gpt2 --preset test-tiny --world 2 {impl} --compare impl --break task:3";
// Stopped once the gather is issued (collective done: the call returned, the op drawn on its lane).
constexpr const char* kShowCollectiveDone =
    "fsdplab gui --model gpt2 --preset test-tiny --world 2 {impl} --compare impl --break task:3:collective-done";

const ForwardTask& graded(const CheckContext& c) { return *c.tasks.forward; }

constexpr const char* kNoWaitCause =
    "the compute stream not ordered after the gather by its event: device.wait(Lane::compute, gathered) "
    "in wait_for_unshard";
// A race in a training: the wait, or the event it waits for, is missing or misplaced.
constexpr const char* kRaceCause =
    "the compute stream not ordered after a gather: all_gather records `gathered` on the all-gather stream after "
    "issuing the gather, and wait_for_unshard makes the compute stream wait for it "
    "(device.wait(Lane::compute, gathered))";

// Rank r's shard of n elements, element i holding 1000 r + i, and the full buffer the gather writes.
struct GatherBuffers {
  Tensor shard;
  Tensor full;
};

GatherBuffers gather_buffers(GradedRank& r, std::int64_t n) {
  GatherBuffers b;
  b.shard = Tensor::empty(r.device, {n}, DType::f32, MemTag::param_shard, "flat_param_shard");
  std::vector<float> values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = static_cast<float>(1000 * r.rank + i);
  b.shard.copy_from(values);
  b.full = Tensor::empty(r.device, {n * r.world}, DType::f32, MemTag::param_full, "flat_param_full", Lane::all_gather);
  return b;
}

Check make(std::string id, std::string title, int points, std::function<CheckOutcome(const CheckContext&)> run,
           std::string show = kShow) {
  return {3, std::move(id), std::move(title), points, std::move(show), std::move(run)};
}

CheckOutcome gather_leaves_shards_in_rank_order(const CheckContext& c) {
  constexpr std::int64_t n = 5;
  for (int world : {2, 3, 4}) {
    RankFindings found(static_cast<std::size_t>(world));
    on_ranks(world, [&](GradedRank& r) {
      const GatherBuffers b = gather_buffers(r, n);
      Event gathered("gathered");
      graded(c).all_gather(r.device, r.comm, b.shard, b.full, gathered);
      CheckOutcome& mine = found[static_cast<std::size_t>(r.rank)];
      r.device.synchronize();  // the values only: where `gathered` is recorded is gather-stream's
      const std::vector<float> got = b.full.to_vector();
      for (std::int64_t k = 0; k < n * world; ++k) {
        const auto want = static_cast<float>(1000 * (k / n) + k % n);
        if (got[static_cast<std::size_t>(k)] == want) continue;
        std::ostringstream s;
        s << "W = " << world << ": rank " << r.rank << "'s full element " << k << " is "
          << got[static_cast<std::size_t>(k)] << ", expected " << want << " (rank " << k / n << "'s shard element "
          << k % n << ")";
        mine = CheckOutcome::fail(
            "chunk q of every rank's full buffer = rank q's shard", s.str(),
            "the gather does not put the shards in rank order into `full`: group.all_gather(stream, shard, full)");
        return;
      }
    });
    if (CheckOutcome o = first_failure(found); !o.passed()) return o;
  }
  return CheckOutcome::pass();
}

// The gather issued while the unit before computes (1 ms on the compute stream), then a moment's work on every other
// stream: the gather waits for none of it, and none of it waits for the gather (read from the ops' dependencies,
// OpRecord::deps, which name the ops an event wait ordered them after). At W = 2, then at W = 1, where the gather is a
// copy of the shard and still the all-gather stream's.
CheckOutcome one_gather_on_its_stream_event_behind_it(const CheckContext& c) {
  constexpr std::int64_t n = 1024;
  for (const int world : {2, 1}) {
    RankFindings found(static_cast<std::size_t>(world));
    on_ranks(world, [&](GradedRank& r) {
      const GatherBuffers b = gather_buffers(r, n);
      Event gathered("gathered");
      const OpRecord computing =
          busy_op(r.device, Lane::compute, OpCategory::compute, "the previous unit's forward", 1'000'000);
      const std::size_t before = r.device.ops().size();
      graded(c).all_gather(r.device, r.comm, b.shard, b.full, gathered);
      const std::vector<OpRecord> ops = ops_since(r.device, before);
      std::vector<OpRecord> next_work;
      for (const Lane lane : {Lane::compute, Lane::reduce_scatter, Lane::memcpy})
        next_work.push_back(busy_op(r.device, lane, OpCategory::compute, "work issued next", 1000));
      const int gathers = count_of(ops, OpCategory::all_gather);
      const OpRecord* gather = first_of(ops, OpCategory::all_gather);
      const std::string rank = (r.world == 1 ? "W = 1, rank " : "rank ") + std::to_string(r.rank) + ": ";
      CheckOutcome& mine = found[static_cast<std::size_t>(r.rank)];
      if (gathers != 1) {
        mine = CheckOutcome::fail(
            "one all-gather op", rank + std::to_string(gathers) + " all-gather ops issued",
            r.world == 1 && gathers == 0
                ? "no gather at W = 1: one rank's gather is a copy, but it is the all-gather stream's, where a bf16 "
                  "cast and an offload copy of the shard are ordered before it; issue group.all_gather(device.stream("
                  "Lane::all_gather), shard, full) whatever W"
                : "all_gather must issue exactly one collective: "
                  "group.all_gather(device.stream(Lane::all_gather), shard, full)");
      } else if (gather->lane != Lane::all_gather) {
        mine = CheckOutcome::fail(
            "the all-gather on the all_gather stream",
            rank + "it ran on the " + std::string(lane_name(gather->lane)) + " stream",
            gather->lane == Lane::compute
                ? "the gather issued on the compute stream: compute then waits for the link, and the next unit's "
                  "gather cannot run under this unit's compute; use device.stream(Lane::all_gather)"
                : "the gather issued on the " + std::string(lane_name(gather->lane)) +
                      " stream, which the backward's reductions use: a gather queues behind them there and the "
                      "schedule's streams mean nothing; use device.stream(Lane::all_gather)");
      } else if (gather->bytes_moved != b.full.nbytes()) {
        mine = CheckOutcome::fail("the whole full buffer gathered (" + std::to_string(b.full.nbytes()) + " bytes)",
                                  rank + "the gather moved " + std::to_string(gather->bytes_moved) + " bytes",
                                  "only part of the buffer gathered");
      } else if (!gathered.recorded()) {
        mine = CheckOutcome::fail(
            "`gathered` recorded on the all_gather stream", rank + "never recorded",
            "the event not recorded: device.record(gathered, Lane::all_gather) after issuing the gather");
      } else if (gathered.lane() != Lane::all_gather) {
        mine = CheckOutcome::fail("`gathered` recorded on the all_gather stream",
                                  rank + "recorded on the " + std::string(lane_name(gathered.lane())) + " stream",
                                  "the event must mark the gather's end on the stream that runs it: "
                                  "device.record(gathered, Lane::all_gather)");
      } else if (gathered.time() < gather->end) {
        mine = CheckOutcome::fail(
            "`gathered` recorded behind the gather (at or after its end, " + us(gather->end) + ")",
            rank + "`gathered` completes at " + us(gathered.time()) + ", before the gather ends",
            "the event recorded before the gather was issued: it marks nothing, so a stream waiting on it is "
            "not ordered after the gather; record after group.all_gather(...)");
      } else if (waited_for(*gather, computing.id)) {
        mine = CheckOutcome::fail(
            "the gather issued at once on the all-gather stream, waiting for no other stream",
            rank + "it waits for " + computing.name + " on the compute stream, starting at " + us(gather->begin),
            "the all-gather stream made to wait for the compute stream in all_gather (a wait_stream or an event "
            "wait): a prefetched gather then cannot run under the computing unit, which is what the all-gather "
            "stream is for",
            0.5);
      } else {
        for (const OpRecord& next : next_work)
          if (waited_for(next, gather->id)) {
            mine = CheckOutcome::fail(
                "all_gather to make no stream wait for the gather (wait_for_unshard does, when the unit computes)",
                rank + "work issued on the " + std::string(lane_name(next.lane)) +
                    " stream after all_gather waits for the gather",
                "a stream made to wait for the gather inside all_gather: for a prefetch that is the current unit's "
                "compute waiting for the next unit's parameters, so nothing overlaps; the wait belongs in "
                "wait_for_unshard, which runs when the unit is about to compute",
                0.5);
            break;
          }
      }
      // At W = 1 the mistake shows in bf16, as a race with the engine's cast of the shard.
      if (r.world == 1 && !mine.passed()) mine.show = one_rank_in_bf16().command("gui", "{impl}");
    });
    if (CheckOutcome outcome = first_failure(found); !outcome.passed()) return outcome;
  }
  return CheckOutcome::pass();
}

// Why compute was not ordered after the gather, from where the graded wait went: a probe op on each other stream
// names the gather among its dependencies (OpRecord::deps) when wait_for_unshard made that stream wait for
// `gathered`. kNoWaitCause unless it did.
std::string unordered_compute_cause(const CheckContext& c) {
  std::string cause = kNoWaitCause;
  on_ranks(2, [&](GradedRank& r) {
    const GatherBuffers b = gather_buffers(r, 16);
    Event gathered("gathered");
    const std::size_t before = r.device.ops().size();
    reference_forward().all_gather(r.device, r.comm, b.shard, b.full, gathered);
    const OpId gather = first_of(ops_since(r.device, before), OpCategory::all_gather)->id;
    graded(c).wait_for_unshard(r.device, gathered);
    if (r.rank != 0) return;
    for (const Lane lane : {Lane::all_gather, Lane::reduce_scatter, Lane::memcpy}) {
      if (waited_for(busy_op(r.device, lane, OpCategory::compute, "probe", 1000), gather))
        cause = "the " + std::string(lane_name(lane)) +
                " stream made to wait for `gathered`, not the compute stream that reads the parameters: "
                "device.wait(Lane::compute, gathered)";
    }
  });
  return cause;
}

// The graded wait issued behind a later gather on the all-gather stream (the next unit's prefetch, as task 6 issues
// it): compute must start after the unit's gather, and before the prefetch ends ("nothing else is waited for").
CheckOutcome compute_ordered_after_the_gather(const CheckContext& c) {
  constexpr std::int64_t n = 1024;
  RankFindings found(2);
  bool unordered = false;
  on_ranks(2, [&](GradedRank& r) {
    const GatherBuffers b = gather_buffers(r, n);
    Event gathered("gathered");
    const std::size_t before = r.device.ops().size();
    // The reference's gather, so that only wait_for_unshard is graded here.
    reference_forward().all_gather(r.device, r.comm, b.shard, b.full, gathered);
    const OpRecord prefetch = busy_op(r.device, Lane::all_gather, OpCategory::all_gather,
                                      "all_gather of the next unit (a prefetch, issued after `gathered`)", 1'000'000);
    graded(c).wait_for_unshard(r.device, gathered);
    const SimTime host_after_wait = r.device.host_time();
    // The unit's first compute op: it reads the parameters the gather wrote.
    const Tensor out = Tensor::empty(r.device, {n * r.world}, DType::f32, MemTag::activation, "reads_parameters");
    CheckOutcome& mine = found[static_cast<std::size_t>(r.rank)];
    const std::string expected = "the compute op reading the gathered parameters to start after the gather";
    try {
      copy(r.device.stream(Lane::compute), b.full, out);
    } catch (const RaceError& e) {
      mine = CheckOutcome::race(expected, e.what(), kNoWaitCause);
      unordered = true;
      return;
    }
    const std::vector<OpRecord> ops = ops_since(r.device, before);
    const OpRecord* gather = first_of(ops, OpCategory::all_gather);
    const OpRecord& read = ops.back();
    const std::string rank = "rank " + std::to_string(r.rank) + ": ";
    if (read.begin < gather->end) {
      mine = CheckOutcome::fail(expected + " (" + us(gather->end) + ")", rank + "it starts at " + us(read.begin),
                                kNoWaitCause);
      unordered = true;
    } else if (read.begin >= prefetch.end && host_after_wait < prefetch.end) {  // a host wait is no-host-sync's
      mine = CheckOutcome::fail(
          expected + " (" + us(gather->end) + "), not after the all-gather stream's later work (the next unit's " +
              "prefetch, ending at " + us(prefetch.end) + ")",
          rank + "it starts at " + us(read.begin),
          "compute made to wait for the whole all-gather stream (wait_stream, or an event recorded in "
          "wait_for_unshard) instead of `gathered`: with prefetching, a unit's forward then waits for the next "
          "units' gathers too; device.wait(Lane::compute, gathered)",
          0.5);
    }
  });
  CheckOutcome outcome = first_failure(found);
  if (unordered) outcome.cause = unordered_compute_cause(c);
  return outcome;
}

CheckOutcome no_host_wait_for_the_gather(const CheckContext& c) {
  constexpr std::int64_t n = 1 << 14;  // a gather that takes the link well beyond the host's launch
  RankFindings found(2);
  on_ranks(2, [&](GradedRank& r) {
    const GatherBuffers b = gather_buffers(r, n);
    Event gathered("gathered");
    // Work in flight on the other streams, so that a host sync of any stream shows on the host clock: the host
    // reaches at least the end of the first issued, which ends first.
    SimTime busy_until = 0;
    for (const Lane lane : {Lane::compute, Lane::reduce_scatter, Lane::memcpy}) {
      const SimTime end = busy_op(r.device, lane, OpCategory::compute, "work in flight", 1'000'000).end;
      if (busy_until == 0) busy_until = end;
    }
    const std::size_t before = r.device.ops().size();
    const SimTime host_before_gather = r.device.host_time();
    graded(c).all_gather(r.device, r.comm, b.shard, b.full, gathered);
    const SimTime host_after_gather = r.device.host_time();
    const std::vector<OpRecord> ops = ops_since(r.device, before);
    const OpRecord* gather = first_of(ops, OpCategory::all_gather);
    const std::string rank = "rank " + std::to_string(r.rank) + ": ";
    const std::string note = " ([Note: an event wait, not a host sync] in engine/fsdp/forward_task.hpp)";
    CheckOutcome& mine = found[static_cast<std::size_t>(r.rank)];
    if (host_after_gather >= busy_until) {
      mine = CheckOutcome::fail(
          "all_gather to return at once, whatever the other streams are running (the first of their work ends at " +
              us(busy_until) + ")",
          rank + "the host clock went from " + us(host_before_gather) + " to " + us(host_after_gather) +
              " in all_gather",
          "the host waits for the device (a synchronize) in all_gather: the CPU stops issuing work until the "
          "device is idle, so the gather is issued late and nothing overlaps" +
              note);
      return;
    }
    if (gather && host_after_gather >= gather->end) {
      mine = CheckOutcome::fail(
          "all_gather to return while the gather runs (it ends at " + us(gather->end) + ")",
          rank + "the host clock went from " + us(host_before_gather) + " to " + us(host_after_gather) +
              " in all_gather",
          "the host waits for the gather (a synchronize) in all_gather: the CPU stops issuing work until the "
          "link is done, so nothing overlaps" + note);
      return;
    }
    // An event never recorded is gather-stream's mistake: record it behind the gather, so that the wait is graded
    // on its own (waiting for an event never recorded is an error on the sim device).
    if (!gathered.recorded()) r.device.record(gathered, Lane::all_gather);
    const SimTime host_before_wait = r.device.host_time();
    graded(c).wait_for_unshard(r.device, gathered);
    const SimTime host_after_wait = r.device.host_time();
    // With no gather issued there is nothing to wait for (gather-stream reports that).
    if (gather && host_after_wait >= gather->end)
      mine = CheckOutcome::fail(
          "wait_for_unshard to cost the host nothing (the gather ends at " + us(gather->end) + ")",
          rank + "the host clock went from " + us(host_before_wait) + " to " + us(host_after_wait) +
              " in wait_for_unshard",
          "a host sync (device.synchronize) instead of a stream wait: the CPU stops until the gather is done and "
          "can no longer issue the next unit's gather under this unit's compute; device.wait(Lane::compute, "
          "gathered) costs the host nothing" + note);
  });
  return first_failure(found);
}

// The reshard-policy check's command, to which the strategy that failed adds its flags (W = 4: S = 2 for hybrid).
constexpr const char* kPolicyShow = "fsdplab run --model gpt2 --preset gpt2 --world 4 --steps 2 --dry-run";
std::string strategy_flags(ShardingStrategy strategy) {
  if (strategy == ShardingStrategy::full_shard) return "";
  if (strategy == ShardingStrategy::hybrid_shard) return " --strategy hybrid --hybrid-group 2";
  // The replicated strategies free a unit's 16-bit copy only: bf16 shows it.
  return " --strategy " + std::string(strategy_name(strategy)) +
         (parameters_replicated(strategy) ? " --precision bf16" : "");
}

// Every strategy, root or not. Each kind of wrong answer (the root, a sharded strategy's units kept, grad_op's freed,
// a replicated strategy's freed) costs half the check and names its cause, whichever strategies show it.
CheckOutcome reshard_after_forward_policy(const CheckContext& c) {
  std::vector<std::string> causes;  // one per kind of wrong answer, in the order found
  std::string expected, got, show;  // every wrong case, so that one round fixes them all
  for (ShardingStrategy strategy :
       {ShardingStrategy::full_shard, ShardingStrategy::hybrid_shard, ShardingStrategy::shard_grad_op,
        ShardingStrategy::no_shard, ShardingStrategy::zero1, ShardingStrategy::zero2}) {
    for (bool is_root : {false, true}) {
      const bool want = reference_forward().reshard_after_forward(strategy, is_root);
      const bool answer = graded(c).reshard_after_forward(strategy, is_root);
      if (answer == want) continue;
      const std::string call = "reshard_after_forward(" + std::string(strategy_name(strategy)) +
                               ", is_root = " + (is_root ? "true" : "false") + ")";
      expected += (expected.empty() ? "" : "; ") + call + " = " + (want ? "true" : "false");
      got += (got.empty() ? "" : "; ") + call + " = " + (answer ? "true" : "false");
      std::string cause;
      if (is_root)
        cause = "the root resharded after forward: its parameters are the first the backward needs, so it is "
                "gathered again at once (one extra gather of the largest unit per step)";
      else if (want)
        cause =
            "units kept gathered after their forward under full and hybrid sharding: param_full then peaks at "
            "the whole model, SHARD_GRAD_OP's memory";
      else if (strategy == ShardingStrategy::shard_grad_op)
        cause = "the strategy ignored: grad_op keeps every unit gathered from forward to backward "
                "(reshards_after_forward(strategy))";
      else
        cause =
            "units resharded under no_shard, zero1 or zero2, which keep the whole parameters on every rank: "
            "nothing is gathered to free, and under bf16 the 16-bit copy is made again for the backward "
            "(reshards_after_forward(strategy))";
      if (std::find(causes.begin(), causes.end(), cause) != causes.end()) continue;
      causes.push_back(cause);
      // The dry run under the first strategy that failed: its collectives and param_full beside the reference's.
      if (show.empty()) show = std::string(kPolicyShow) + strategy_flags(strategy) + " {impl}";
    }
  }
  if (causes.empty()) return CheckOutcome::pass();
  std::string cause;
  for (const std::string& one : causes) cause += (cause.empty() ? "" : "; ") + one;
  CheckOutcome outcome =
      CheckOutcome::fail(expected, got, cause, std::max(0.0, 1 - 0.5 * static_cast<double>(causes.size())));
  outcome.show = show;
  return outcome;
}

// ---- trainings ---------------------------------------------------------------------------------------

// Rank 0's ops of `category`.
int count_ops(const GradedRun& run, OpCategory category) { return count_of(run.ops[0], category); }

// When rank 0's last op ends: the virtual time of the whole training.
SimTime end_of(const GradedRun& run) {
  SimTime end = 0;
  for (const OpRecord& op : run.ops[0]) end = std::max(end, op.end);
  return end;
}

// The direct checks of the gather and its wait, whose first failing cause (first_failing_cause) is a training's: its
// race or stop is most often one of these mistakes, and they name it precisely.
const std::vector<DirectCheck> kDirectChecks = {
    gather_leaves_shards_in_rank_order, one_gather_on_its_stream_event_behind_it, compute_ordered_after_the_gather};

// `c` trained with the graded tasks and with the reference, op graphs kept; the graded run's failure
// as an outcome when it did not train.
struct BesideReference {
  GradedRun graded;
  GradedRun reference;
  CheckOutcome failure;  // passed when the graded run trained
};

BesideReference train_beside_reference(const CheckContext& ctx, GradeCase c) {
  c.run.seed = ctx.seed;
  BesideReference out;
  out.graded = train_graded(c, ctx.tasks, ctx.scratch, {.ops = true, .params = false});
  if (!out.graded.trained()) {
    out.failure = stopped_training(
        "the training to run to its end", out.graded,
        cause_of_training(out.graded, kRaceCause, "", [&] { return first_failing_cause(ctx, kDirectChecks); }),
        c.command("run", ctx.impl_flag()));
    return out;
  }
  out.reference = train_graded(c, ctx.reference, ctx.scratch, {.ops = true, .params = false});
  return out;
}

// The all-gather ops one call of the graded all_gather issues (the reference's: one), so that a training with more
// gathers than the reference's blames all_gather where it gathers twice, not reshard_after_forward.
int gathers_per_call(const CheckContext& c) {
  int issued = 1;
  on_ranks(2, [&](GradedRank& r) {
    const GatherBuffers b = gather_buffers(r, 16);
    Event gathered("gathered");
    const std::size_t before = r.device.ops().size();
    graded(c).all_gather(r.device, r.comm, b.shard, b.full, gathered);
    if (r.rank == 0) issued = count_of(ops_since(r.device, before), OpCategory::all_gather);
  });
  return issued;
}

// Why a training gathered more than the reference's: all_gather's own gathers, or a unit resharded and gathered
// again (`otherwise`).
std::string more_gathers_cause(const CheckContext& c, std::string otherwise) {
  const int per_call = gathers_per_call(c);
  if (per_call <= 1) return otherwise;
  return "all_gather issues " + std::to_string(per_call) +
         " all-gathers a call (see gather-stream): every unit's parameters cross the link " +
         (per_call == 2 ? std::string("twice") : std::to_string(per_call) + " times") +
         "; one group.all_gather(device.stream(Lane::all_gather), shard, full)";
}

// Four Blocks, each larger than the root: a unit kept gathered after its forward shows in the peak.
CheckOutcome peak_param_full_and_gathers_as_the_reference(const CheckContext& c) {
  GradeCase run = small_gpt2(2);
  run.run.preset = "test-small";
  run.run.steps = 2;
  const BesideReference runs = train_beside_reference(c, run);
  if (!runs.failure.passed()) return runs.failure;
  const auto peak_full = [](const GradedRun& r) {
    return budget_of(r).peak[static_cast<std::size_t>(MemTag::param_full)];
  };
  const std::int64_t peak = peak_full(runs.graded), reference_peak = peak_full(runs.reference);
  const int gathers = count_ops(runs.graded, OpCategory::all_gather),
            reference_gathers = count_ops(runs.reference, OpCategory::all_gather);
  CheckOutcome outcome = CheckOutcome::pass();
  if (peak != reference_peak || gathers != reference_gathers) {
    std::string cause = "the units freed after forward are not the reference's (reshard_after_forward)";
    if (peak > reference_peak)
      cause = "units kept gathered from their forward to their backward: param_full grows towards the whole model "
              "(reshard_after_forward false)";
    else if (gathers > reference_gathers)
      cause = more_gathers_cause(
          c,
          "the root resharded after forward, and gathered again as the first thing of the backward "
          "(reshard_after_forward true for the root): a gather more each step; the peak is lower here, where "
          "the root is smaller than each Block, and higher at GPT-2 124M, where the root is the largest unit");
    outcome = CheckOutcome::fail("peak param_full " + megabytes(reference_peak) + " and " +
                                     std::to_string(reference_gathers) + " gathers on rank 0",
                                 "peak param_full " + megabytes(peak) + " and " + std::to_string(gathers) + " gathers",
                                 cause);
  }
  return with_budget(std::move(outcome), runs.graded, runs.reference);
}

CheckOutcome no_gather_on_compute_no_slower(const CheckContext& c) {
  const BesideReference runs = train_beside_reference(c, small_gpt2(2));
  if (!runs.failure.passed()) return runs.failure;
  const auto& ops = runs.graded.ops[0];
  const auto on_compute = std::count_if(ops.begin(), ops.end(), [](const OpRecord& op) {
    return op.category == OpCategory::all_gather && op.lane == Lane::compute;
  });
  const int gathers = count_ops(runs.graded, OpCategory::all_gather),
            reference_gathers = count_ops(runs.reference, OpCategory::all_gather);
  const SimTime end = end_of(runs.graded), reference_end = end_of(runs.reference);
  std::ostringstream got;
  got << on_compute << " of " << gathers << " gathers on the compute stream, 3 steps in " << us(end) << ", overlap "
      << percent(budget_of(runs.graded).overlap_percent);
  std::ostringstream want;
  want << "none of " << reference_gathers << " gathers on the compute stream, 3 steps in " << us(reference_end)
       << ", overlap " << percent(budget_of(runs.reference).overlap_percent);
  CheckOutcome outcome = CheckOutcome::pass();
  if (on_compute > 0)
    outcome = CheckOutcome::fail(want.str(), got.str(),
                                 "gathers issued on the compute stream: use device.stream(Lane::all_gather)");
  else if (end > reference_end)
    outcome = CheckOutcome::fail(
        want.str(), got.str(),
        gathers > reference_gathers
            ? more_gathers_cause(
                  c, "more gathers than the reference's take the link (see the memory check: reshard_after_forward)")
            : "the host waits for gathers (a synchronize), or the compute stream for more than its unit's gather: less "
              "of the communication hides under compute");
  return with_budget(std::move(outcome), runs.graded, runs.reference);
}

CheckOutcome trains_equal_at_every_world(const CheckContext& c) {
  GradeCase run = small_gpt2(1);
  run.run.batch = 24;  // split evenly over every world size tried
  return trains_equal_at(c, kRaceCause, run, {1, 2, 3, 4, 8},
                         "the gathered parameters are not every rank's shard in rank order",
                         first_failing_cause(kDirectChecks));
}

}  // namespace

std::vector<Check> forward_checks() {
  return {
      make("gather-values", "all_gather leaves every rank's shard in rank order in the full buffer (W = 2, 3, 4)", 1,
           gather_leaves_shards_in_rank_order),
      make("gather-stream",
           "one all-gather of the whole buffer on the all-gather stream (at W = 1 too), its event recorded behind it, "
           "no stream waiting for the other",
           2, one_gather_on_its_stream_event_behind_it, kShowCollectiveDone),
      make("event-wait",
           "after wait_for_unshard, compute is ordered after the gather (the race detector clean), and after nothing "
           "later",
           2, compute_ordered_after_the_gather),
      make("no-host-sync", "neither all_gather nor wait_for_unshard makes the host wait for the gather", 2,
           no_host_wait_for_the_gather),
      make("reshard-policy",
           "reshard_after_forward: never the root; every other unit under full and hybrid; none under grad_op, "
           "no_shard, zero1, zero2",
           2, reshard_after_forward_policy, std::string(kPolicyShow) + " {impl}"),
      make("memory", "gpt2 test-small W = 2: peak param_full and the number of gathers as the reference's", 1,
           peak_param_full_and_gathers_as_the_reference,
           "fsdplab gui --model gpt2 --preset test-small --world 2 {impl} --compare impl"),
      make("overlap", "ASYNC gpt2 test-tiny W = 2: no gather on the compute stream, no slower than the reference", 1,
           no_gather_on_compute_no_slower),
      make("training", "gpt2 test-tiny trains equal to the single-rank baseline at W = 1, 2, 3, 4, 8", 2,
           trains_equal_at_every_world),
  };
}

}  // namespace fsdplab::grading
