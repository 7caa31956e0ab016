// Task 4's checks: BackwardTask (engine/fsdp/backward_task.hpp, labs/04-backward).
// Direct calls on W ranks, each rank's gradient (r + 1) x with x small integers so that every mean is
// exact: the shard each rank receives (the mean, not the sum, and its own chunk), the reduction ordered
// after the compute stream's write (the race detector names both ops of a missing event), the one
// reduce-scatter on its own stream (the op graph), no host wait (the host's virtual clock would jump to
// the backward's end), and zero_gradient leaving zeros the compute stream sees. Then trainings of gpt2
// test-tiny: the ASYNC schedule of the reductions beside the reference's, and SGD — which, unlike AdamW,
// shows a gradient W times too large — equal to the single-rank baseline at W = 1, 2, 3, 4 and 8.
#include <algorithm>
#include <set>
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
    "fsdplab gui --model gpt2 --preset test-tiny --world 2 {impl} --compare impl --break task:4";
// Stopped once the reduce-scatter is issued (collective done: the call returned, the op drawn on its lane).
constexpr const char* kShowCollectiveDone =
    "fsdplab gui --model gpt2 --preset test-tiny --world 2 {impl} --compare impl --break task:4:collective-done";
// A sum or a double mean changes no timeline; it shows in SGD's losses, which the step-time panel compares with the
// reference's.
constexpr const char* kShowLosses =
    "fsdplab gui --model gpt2 --preset test-tiny --world 2 --optimizer sgd --lr 0.1 {impl} --compare impl";

const BackwardTask& graded(const CheckContext& c) { return *c.tasks.backward; }

constexpr const char* kNoEventCause =
    "no event between the backward and the reduction: record an Event on Lane::compute and "
    "device.wait(Lane::reduce_scatter, it) before the reduce-scatter";
// A race in a training: the zeroing or the reduction on a stream nothing orders against compute.
constexpr const char* kRaceCause =
    "two streams use the gradient with no event between them: zero_gradient fills on the compute stream, where the "
    "backward adds into grad_full, and reduce_scatter's stream waits for an event recorded on compute";

// x: small integers, so that (r + 1) x summed over W ranks and divided by W is exact in f32.
std::vector<float> base_gradient(std::int64_t n) {
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(i % 13 - 6);
  return x;
}

std::vector<float> times(std::vector<float> v, float factor) {
  for (float& e : v) e *= factor;
  return v;
}

std::vector<float> chunk(const std::vector<float>& v, int index, std::int64_t n) {
  const auto first = v.begin() + index * n;
  return {first, first + n};
}

// Rank r's gradient of a unit of n * W elements and the shard the reduction writes, on rank r's device;
// grad_full written by the host (so ordered before anything the rank issues next) unless the caller
// writes it on a stream.
struct GradBuffers {
  std::vector<float> values;  // (r + 1) x
  Tensor grad_full;
  Tensor grad_shard;
};

GradBuffers grad_buffers(GradedRank& r, std::int64_t n, bool host_writes = true) {
  GradBuffers b;
  b.values = times(base_gradient(n * r.world), static_cast<float>(r.rank + 1));
  b.grad_full = Tensor::empty(r.device, {n * r.world}, DType::f32, MemTag::grad_full, "flat_grad_full");
  if (host_writes) b.grad_full.copy_from(b.values);
  b.grad_shard = Tensor::empty(r.device, {n}, DType::f32, MemTag::grad_shard, "flat_grad_shard", Lane::reduce_scatter);
  return b;
}

// Why rank `rank`'s shard holds `got` instead of chunk `rank` of the mean, tried against the README's pitfalls.
std::string reduction_cause(const std::vector<float>& got, const std::vector<float>& mean, int rank, int world,
                            std::int64_t n) {
  const std::vector<float> want = chunk(mean, rank, n);
  if (got == times(want, static_cast<float>(world)))
    return "summed, not averaged: each rank's gradient is already of its own rows' mean loss, so the mean over the W "
           "ranks (ReduceOp::avg) is the baseline's gradient; the sum is W times too large ([Note: sum or mean] in "
           "engine/fsdp/backward_task.hpp)";
  if (times(got, static_cast<float>(world)) == want)
    return "averaged twice: ReduceOp::avg already divides by the group's size once; do not scale again";
  for (int k = 0; k < world; ++k)
    if (k != rank && got == chunk(mean, k, n))
      return "rank " + std::to_string(rank) + " holds chunk " + std::to_string(k) +
             " of the mean: each rank's shard is chunk group.rank() of the reduction, which "
             "group.reduce_scatter(stream, grad_full, grad_shard, ReduceOp::avg) gives";
  return "grad_shard is not this rank's chunk of the mean over the group: "
         "group.reduce_scatter(stream, grad_full, grad_shard, ReduceOp::avg)";
}

Check make(std::string id, std::string title, int points, std::function<CheckOutcome(const CheckContext&)> run,
           std::string show = kShow) {
  return {4, std::move(id), std::move(title), points, std::move(show), std::move(run)};
}

CheckOutcome each_shard_its_chunk_of_the_mean(const CheckContext& c) {
  constexpr std::int64_t n = 5;
  const std::vector<int> worlds = {2, 3, 4};
  int right = 0;
  CheckOutcome first;
  for (int world : worlds) {
    // The mean of (r + 1) x over W ranks: (W + 1) / 2 x.
    const std::vector<float> mean = times(base_gradient(n * world), static_cast<float>(world + 1) / 2);
    RankFindings found(static_cast<std::size_t>(world));
    on_ranks(world, [&](GradedRank& r) {
      const GradBuffers b = grad_buffers(r, n);
      graded(c).reduce_scatter(r.device, r.comm, b.grad_full, b.grad_shard);
      r.device.synchronize();
      const std::vector<float> got = b.grad_shard.to_vector(), want = chunk(mean, r.rank, n);
      for (std::int64_t i = 0; i < n; ++i) {
        if (got[static_cast<std::size_t>(i)] == want[static_cast<std::size_t>(i)]) continue;
        std::ostringstream s;
        s << "W = " << world << ": rank " << r.rank << "'s grad_shard element " << i << " is "
          << got[static_cast<std::size_t>(i)] << ", expected " << want[static_cast<std::size_t>(i)]
          << " (the mean over the ranks of element " << r.rank * n + i << " of their gradients)";
        found[static_cast<std::size_t>(r.rank)] =
            CheckOutcome::fail("rank r's grad_shard = chunk r of the mean of the ranks' grad_full", s.str(),
                               reduction_cause(got, mean, r.rank, world, n));
        return;
      }
    });
    const CheckOutcome o = first_failure(found);
    if (o.passed())
      ++right;
    else if (first.passed())
      first = o;
  }
  if (first.passed()) return first;
  first.fraction = static_cast<double>(right) / static_cast<double>(worlds.size());
  return first;
}

// Why the reduction raced the backward, from what it waited for: with work already issued on every stream (busy_op),
// an event the graded reduce_scatter waits for carries the last op of the stream it was recorded on, which the
// reduction's dependencies then name. kNoEventCause unless it waited for another stream's event only.
std::string race_cause(const CheckContext& c) {
  std::string cause = kNoEventCause;
  on_ranks(2, [&](GradedRank& r) {
    const GradBuffers b = grad_buffers(r, 1024);
    std::vector<OpRecord> issued;
    for (const Lane lane : {Lane::compute, Lane::all_gather, Lane::reduce_scatter})
      issued.push_back(busy_op(r.device, lane, OpCategory::compute, "work already issued", 1000));
    const std::size_t before = r.device.ops().size();
    graded(c).reduce_scatter(r.device, r.comm, b.grad_full, b.grad_shard);
    const std::vector<OpRecord> ops = ops_since(r.device, before);
    const OpRecord* reduction = first_of(ops, OpCategory::reduce_scatter);
    if (r.rank != 0 || !reduction) return;
    const std::set<Lane> waited = lanes_waited_for(*reduction, issued);
    if (!waited.empty() && !waited.contains(Lane::compute)) {
      cause = "the reduction waits for an event recorded on the " + std::string(lane_name(*waited.begin())) +
              " stream, which orders nothing against the backward: record it on Lane::compute, where the backward "
              "wrote grad_full, and device.wait(Lane::reduce_scatter, it)";
    }
  });
  return cause;
}

CheckOutcome reduction_ordered_after_compute(const CheckContext& c) {
  constexpr std::int64_t n = 1024;
  RankFindings found(2);
  on_ranks(2, [&](GradedRank& r) {
    const GradBuffers b = grad_buffers(r, n, /*host_writes=*/false);
    // The unit's backward: the compute stream writes the gradient.
    const Tensor computed = Tensor::empty(r.device, {n * r.world}, DType::f32, MemTag::activation, "backward_result");
    computed.copy_from(b.values);
    copy(r.device.stream(Lane::compute), computed, b.grad_full);
    const OpRecord backward = r.device.ops().back();
    const std::size_t before = r.device.ops().size();
    CheckOutcome& mine = found[static_cast<std::size_t>(r.rank)];
    try {
      graded(c).reduce_scatter(r.device, r.comm, b.grad_full, b.grad_shard);
    } catch (const RaceError& e) {
      mine = CheckOutcome::race("the reduction ordered after the compute stream's write of grad_full", e.what(),
                                kNoEventCause);
      return;
    }
    const std::vector<OpRecord> ops = ops_since(r.device, before);
    const OpRecord* reduction = first_of(ops, OpCategory::reduce_scatter);
    if (reduction && reduction->begin < backward.end)
      mine = CheckOutcome::fail("the reduce-scatter to start at or after the backward's end (" + us(backward.end) + ")",
                                "rank " + std::to_string(r.rank) + ": it starts at " + us(reduction->begin),
                                "the reduce-scatter stream not ordered after the compute stream: an event recorded on "
                                "Lane::compute, waited for on Lane::reduce_scatter");
  });
  CheckOutcome outcome = first_failure(found);
  if (outcome.raced) {
    try {
      outcome.cause = race_cause(c);
    } catch (const std::exception&) {  // the graded code failed the probe: kNoEventCause stays
    }
  }
  return outcome;
}

// One reduce-scatter of the whole grad_full on the reduce-scatter stream, at W = 2, then at W = 1, where the mean of
// one rank is a copy and still the reduce-scatter stream's.
CheckOutcome one_reduce_scatter_on_its_stream(const CheckContext& c) {
  constexpr std::int64_t n = 1024;
  for (const int world : {2, 1}) {
    RankFindings found(static_cast<std::size_t>(world));
    on_ranks(world, [&](GradedRank& r) {
      const GradBuffers b = grad_buffers(r, n);
      const std::size_t before = r.device.ops().size();
      graded(c).reduce_scatter(r.device, r.comm, b.grad_full, b.grad_shard);
      std::vector<OpRecord> collectives;
      for (const OpRecord& op : ops_since(r.device, before))
        if (is_communication(op.category)) collectives.push_back(op);
      std::string names;
      for (const OpRecord& op : collectives)
        names += (names.empty() ? "" : ", ") + std::string(category_name(op.category)) + " on the " +
                 std::string(lane_name(op.lane)) + " stream";
      const std::string rank = (r.world == 1 ? "W = 1, rank " : "rank ") + std::to_string(r.rank) + ": ";
      CheckOutcome& mine = found[static_cast<std::size_t>(r.rank)];
      const bool one_reduce_scatter = collectives.size() == 1 && collectives[0].category == OpCategory::reduce_scatter;
      if (!one_reduce_scatter) {
        const bool all_reduce = std::any_of(collectives.begin(), collectives.end(),
                                            [](const OpRecord& op) { return op.category == OpCategory::all_reduce; });
        mine = CheckOutcome::fail(
            "one reduce-scatter", rank + (names.empty() ? "no collective" : names),
            all_reduce ? "an all-reduce of the whole gradient: twice the bytes of a reduce-scatter on the link, "
                         "for a whole gradient the rank's optimizer never reads; reduce-scatter into the shard"
            : r.world == 1 && collectives.empty()
                ? "no reduction at W = 1: one rank's mean is a copy, but it is the reduce-scatter stream's, where the "
                  "gradient's widening (bf16) and its copy to the host (offload) are ordered after it; issue "
                  "group.reduce_scatter(device.stream(Lane::reduce_scatter), grad_full, grad_shard, ReduceOp::avg) "
                  "whatever W"
                : "reduce_scatter must issue exactly one collective: group.reduce_scatter(device.stream("
                  "Lane::reduce_scatter), grad_full, grad_shard, ReduceOp::avg)");
      } else if (collectives[0].lane != Lane::reduce_scatter) {
        mine = CheckOutcome::fail(
            "the reduce-scatter on the reduce_scatter stream", rank + names,
            collectives[0].lane == Lane::compute
                ? "the reduction issued on the compute stream: the next unit's backward then waits for every "
                  "reduction; use device.stream(Lane::reduce_scatter)"
                : "the reduction issued on the " + std::string(lane_name(collectives[0].lane)) +
                      " stream, not the one the schedule keeps for reductions: it queues behind that stream's other "
                      "work; use device.stream(Lane::reduce_scatter)");
      } else if (collectives[0].bytes_moved != b.grad_full.nbytes()) {
        mine = CheckOutcome::fail(
            "the whole grad_full reduced (" + std::to_string(b.grad_full.nbytes()) + " bytes)",
            rank + "the reduce-scatter moved " + std::to_string(collectives[0].bytes_moved) + " bytes",
            "only part of grad_full reduced: reduce the whole padded buffer");
      }
      // At W = 1 the mistake shows in bf16, as a race with the engine's widening of the gradient.
      if (r.world == 1 && !mine.passed()) mine.show = one_rank_in_bf16().command("gui", "{impl}");
    });
    if (CheckOutcome outcome = first_failure(found); !outcome.passed()) return outcome;
  }
  return CheckOutcome::pass();
}

// The host's clock only: a missing event (a race, which ordered-after-compute grades) is recorded, not thrown here.
CheckOutcome no_host_wait_for_the_backward(const CheckContext& c) {
  constexpr std::int64_t n = 1024, gathered_n = 1 << 16;
  RankFindings found(2);
  on_ranks(
      2,
      [&](GradedRank& r) {
        const GradBuffers b = grad_buffers(r, n, /*host_writes=*/false);
        // A backward that ends well after the host's time: it waits for a gather on the link first.
        const Tensor shard = Tensor::empty(r.device, {gathered_n}, DType::f32, MemTag::param_shard, "flat_param_shard");
        const Tensor full = Tensor::empty(r.device, {gathered_n * r.world}, DType::f32, MemTag::param_full,
                                          "flat_param_full", Lane::all_gather);
        shard.copy_from(std::vector<float>(gathered_n, 1.0f));
        r.comm.all_gather(r.device.stream(Lane::all_gather), shard, full);
        Event gathered("gathered");
        r.device.record(gathered, Lane::all_gather);
        r.device.wait(Lane::compute, gathered);
        const Tensor computed =
            Tensor::empty(r.device, {n * r.world}, DType::f32, MemTag::activation, "backward_result");
        computed.copy_from(b.values);
        copy(r.device.stream(Lane::compute), computed, b.grad_full);
        const SimTime backward_end = r.device.ops().back().end;
        const SimTime host_before = r.device.host_time();
        graded(c).reduce_scatter(r.device, r.comm, b.grad_full, b.grad_shard);
        const SimTime host_after = r.device.host_time();
        if (host_after >= backward_end)
          found[static_cast<std::size_t>(r.rank)] = CheckOutcome::fail(
              "reduce_scatter to return while the backward still runs (it ends at " + us(backward_end) + ")",
              "rank " + std::to_string(r.rank) + ": the host clock went from " + us(host_before) + " to " +
                  us(host_after) + " in reduce_scatter",
              "a host sync (device.synchronize) before the reduction instead of an event: the host stops issuing "
              "until the backward so far is done and cannot run ahead to fetch the next unit; order the streams with "
              "an event");
      },
      RaceDetector::Policy::record);
  return first_failure(found);
}

CheckOutcome compute_sees_a_zeroed_gradient(const CheckContext& c) {
  constexpr std::int64_t n = 1030;
  auto device = make_graded_device(0);
  // A cached block of an earlier unit's gradient.
  const Tensor grad_full = Tensor::empty(*device, {n}, DType::f32, MemTag::grad_full, "flat_grad_full");
  grad_full.copy_from(std::vector<float>(n, 7.0f));
  graded(c).zero_gradient(*device, grad_full);
  // The backward's first op adding into the gradient reads it on the compute stream.
  const Tensor seen = Tensor::empty(*device, {n}, DType::f32, MemTag::activation, "backward_reads");
  try {
    copy(device->stream(Lane::compute), grad_full, seen);
  } catch (const RaceError& e) {
    return CheckOutcome::race(
        "the compute stream ordered after the zeroing", e.what(),
        "grad_full zeroed on another stream than compute, with nothing ordering the two: the backward "
        "adds into it while the fill may still run; fill(device.stream(Lane::compute), grad_full, 0)");
  }
  device->synchronize();
  const std::vector<float> got = seen.to_vector();
  for (std::int64_t i = 0; i < n; ++i)
    if (got[static_cast<std::size_t>(i)] != 0.0f)
      return CheckOutcome::fail(
          "zeros in every element of grad_full (" + std::to_string(n) + " elements)",
          "element " + std::to_string(i) + " is " + number(got[static_cast<std::size_t>(i)]) +
              " (the block held 7 before)",
          "grad_full not zeroed, or only part of it: the allocator hands out cached blocks with old "
          "contents and the backward adds into them; fill(device.stream(Lane::compute), grad_full, 0)");
  return CheckOutcome::pass();
}

// The direct checks whose first failing cause (first_failing_cause) is a training's: its race, NaN or difference is
// most often one of these mistakes, and they name it precisely (a host sync only slows a training down).
const std::vector<DirectCheck> kDirectChecks = {each_shard_its_chunk_of_the_mean, reduction_ordered_after_compute,
                                                one_reduce_scatter_on_its_stream, compute_sees_a_zeroed_gradient};

struct Reductions {
  int all = 0, on_compute = 0, overlapping = 0;
  int on_their_stream = 0;  // every op on the reduce-scatter stream, the reductions' and any other
  SimTime end = 0;
};

// Rank 0's reductions, and when its last op ends.
Reductions reductions(const GradedRun& training) {
  Reductions r;
  const auto& ops = training.ops[0];
  for (const OpRecord& op : ops) {
    r.end = std::max(r.end, op.end);
    if (op.lane == Lane::reduce_scatter) ++r.on_their_stream;
    if (op.category != OpCategory::reduce_scatter) continue;
    ++r.all;
    if (op.lane == Lane::compute) ++r.on_compute;
    if (std::any_of(ops.begin(), ops.end(),
                    [&](const OpRecord& o) { return o.category == OpCategory::compute && intersects(o, op); }))
      ++r.overlapping;
  }
  return r;
}

CheckOutcome reductions_scheduled_as_the_reference(const CheckContext& c) {
  GradeCase run = small_gpt2(2);
  run.run.seed = c.seed;
  const GradedRun trained = train_graded(run, c.tasks, c.scratch, {.ops = true, .params = false});
  if (!trained.trained())
    return stopped_training(
        "the training to run to its end", trained,
        cause_of_training(trained, kRaceCause, "", [&] { return first_failing_cause(c, kDirectChecks); }),
        run.command("run", c.impl_flag()));
  const GradedRun reference = train_graded(run, c.reference, c.scratch, {.ops = true, .params = false});
  const Reductions got = reductions(trained), want = reductions(reference);
  std::ostringstream g, w;
  g << got.on_compute << " of " << got.all << " reduce-scatters on the compute stream, " << got.overlapping
    << " overlapping compute, 3 steps in " << us(got.end);
  w << "none on the compute stream, " << want.overlapping << " of " << want.all << " overlapping compute, 3 steps in "
    << us(want.end);
  // Less overlap or a later end: the reductions waited for more than their unit's backward.
  const bool later = got.overlapping < want.overlapping || got.end > want.end;
  const int idle = issued_on_an_idle_device(trained.ops[0]),
            reference_idle = issued_on_an_idle_device(reference.ops[0]);
  CheckOutcome outcome = CheckOutcome::pass();
  if (got.on_compute > 0)
    outcome = CheckOutcome::fail(
        w.str(), g.str(), "the reductions issued on the compute stream: use device.stream(Lane::reduce_scatter)");
  else if (later && got.on_their_stream > want.on_their_stream)
    outcome = CheckOutcome::fail(
        w.str(), g.str() + ", " + std::to_string(got.on_their_stream) + " ops on the reduce-scatter stream",
        "the reduce-scatter stream does more than the reference's (" + std::to_string(want.on_their_stream) +
            " ops): an op after the collective, such as a scale by 1/W that ReduceOp::avg already does, delays "
            "every reduction");
  else if (later && idle > reference_idle)
    // The same reductions on the same stream, later: the host stopped issuing until the device was done.
    outcome = CheckOutcome::fail(w.str(),
                                 g.str() + "; " + std::to_string(idle - reference_idle) +
                                     " more ops than the reference's issued after the device had run dry (" +
                                     std::to_string(idle) + " against " + std::to_string(reference_idle) +
                                     "): the host waited for it",
                                 "a host sync in reduce_scatter (device.synchronize): the host waits for the backward "
                                 "before it issues the reduction, and the next unit's backward starts late; a stream "
                                 "wait (device.wait(Lane::reduce_scatter, event)) orders the reduction alone");
  else if (later)
    outcome = CheckOutcome::fail(w.str(), g.str(),
                                 "the reductions wait for more than their unit's backward (a host sync, or an event "
                                 "recorded later than the gradient's last write): less of them hides under the next "
                                 "unit's backward");
  return with_budget(std::move(outcome), trained, reference);
}

CheckOutcome sgd_trains_equal_at_every_world(const CheckContext& c) {
  GradeCase run = small_gpt2(1);
  run.run.batch = 24;  // split evenly over every world size tried
  run.run.optimizer = "sgd";
  run.run.lr = 0.1;
  return trains_equal_at(
      c, kRaceCause, run, {1, 2, 3, 4, 8},
      "the gradient summed over the ranks instead of averaged, or averaged twice: SGD's steps are then W "
      "times too long or too short (AdamW hides it)",
      first_failing_cause(kDirectChecks));
}

}  // namespace

std::vector<Check> backward_checks() {
  return {
      make("mean", "each rank's grad_shard is its own chunk of the mean over the ranks (W = 2, 3, 4)", 3,
           each_shard_its_chunk_of_the_mean, kShowLosses),
      make("ordered-after-compute",
           "the reduction starts after the compute stream's write of grad_full (race detector clean)", 2,
           reduction_ordered_after_compute),
      make("reduction-stream", "one reduce-scatter of the whole gradient, on the reduce-scatter stream (at W = 1 too)",
           2, one_reduce_scatter_on_its_stream, kShowCollectiveDone),
      make("no-host-sync", "reduce_scatter does not make the host wait for the backward", 1,
           no_host_wait_for_the_backward),
      make("zero-gradient", "after zero_gradient the compute stream sees zeros in the whole grad_full", 2,
           compute_sees_a_zeroed_gradient),
      make("schedule", "ASYNC gpt2 test-tiny W = 2: reductions on their stream, overlapping compute as the reference's",
           1, reductions_scheduled_as_the_reference),
      make("sgd-training", "SGD (lr 0.1) trains equal to the single-rank baseline at W = 1, 2, 3, 4, 8", 3,
           sgd_trains_equal_at_every_world, kShowLosses),
  };
}

}  // namespace fsdplab::grading
