// Task 8's checks: HybridShardTask (engine/fsdp/hybrid_shard_task.hpp, labs/08-hybrid-shard).
// The colours are checked by the groups they make, for several W and S, not by their values (any colours
// that make the right groups are right): shard groups of S consecutive ranks (a node's), replica groups of
// the ranks holding the same chunk. Swapped colours train exactly like the reference on the sim device, so
// only this direct look can see them. all_reduce_replicas is called on real replica groups (made with the
// reference's colours, so a colour mistake is not charged twice): the values it leaves (the mean, not the
// sum, over the replicas), then the op it issues read from the op graph and the virtual clock (one
// all_reduce on the reduce-scatter stream, no host wait). Then two hybrid trainings against the single-rank
// baseline, one with SGD, which shows a gradient scale error that AdamW hides.
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "grader/check_catalog.hpp"
#include "grader/diagnostic_text.hpp"
#include "grader/graded_run.hpp"
#include "grader/rank_harness.hpp"

namespace fsdplab::grading {
namespace {

constexpr const char* kShow =
    "fsdplab gui --model gpt2 --world 4 --strategy hybrid --hybrid-group 2 {impl} --compare impl --break task:8";
// Stopped once the all-reduce across the replicas is issued (collective done: the op drawn on its lane).
constexpr const char* kShowCollectiveDone =
    "fsdplab gui --model gpt2 --world 4 --strategy hybrid --hybrid-group 2 {impl} --compare impl --break "
    "task:8:collective-done";
// The colours' mistakes train and time like the reference on one node; on nodes of S ranks a unit sharded across
// nodes gathers over the slower link between them, beside the reference's run. On h100-sxm, whose link inside a
// node (nvlink4) is the fast one: the dashboard's default device, rtx-4090, has the slower inside its nodes.
constexpr const char* kShowOnNodes =
    "fsdplab gui --model gpt2 --world 4 --strategy hybrid --hybrid-group 2 --ranks-per-node 2 --device-preset h100-sxm "
    "{impl} --compare impl";

const HybridShardTask& graded(const CheckContext& c) { return *c.tasks.hybrid_shard; }
const HybridShardTask& reference(const CheckContext& c) { return *c.reference.hybrid_shard; }

Check make(std::string id, std::string title, int points, std::function<CheckOutcome(const CheckContext&)> run,
           std::string show = kShow) {
  return {8, std::move(id), std::move(title), points, std::move(show), std::move(run)};
}

// ---- the colours -----------------------------------------------------------------------------------

using Groups = std::vector<std::vector<int>>;  // each group's ranks in order, groups by their first rank

// The groups Communicator::split makes of W ranks from their colours; a negative colour is reported in
// `negative` (split refuses it).
Groups groups_of(const std::vector<int>& colors, std::string& negative) {
  std::map<int, std::vector<int>> by_color;
  for (std::size_t r = 0; r < colors.size(); ++r) {
    if (colors[r] < 0 && negative.empty())
      negative = "rank " + std::to_string(r) + " gets colour " + std::to_string(colors[r]);
    by_color[colors[r]].push_back(static_cast<int>(r));
  }
  Groups groups;
  for (auto& [color, ranks] : by_color) groups.push_back(std::move(ranks));
  std::sort(groups.begin(), groups.end());
  return groups;
}

std::string groups_text(const Groups& groups) {
  std::string s;
  for (const std::vector<int>& g : groups) {
    s += s.empty() ? "{" : " {";
    for (std::size_t i = 0; i < g.size(); ++i) s += (i ? " " : "") + std::to_string(g[i]);
    s += "}";
  }
  return s;
}

// Shard groups: blocks of S consecutive ranks. Replica groups: the ranks r, r + S, r + 2S ... (same chunk).
Groups consecutive_blocks(int world, int s) {
  Groups g(static_cast<std::size_t>(world / s));
  for (int r = 0; r < world; ++r) g[static_cast<std::size_t>(r / s)].push_back(r);
  return g;
}
Groups same_chunk(int world, int s) {
  Groups g(static_cast<std::size_t>(s));
  for (int r = 0; r < world; ++r) g[static_cast<std::size_t>(r % s)].push_back(r);
  return g;
}

// The (W, S) the colour checks try: nodes of 4 and of 2, odd S, S = 1 and S = W.
constexpr std::pair<int, int> kShapes[] = {{8, 4}, {8, 2}, {6, 3}, {6, 2}, {4, 2}, {4, 1}, {4, 4}};

CheckOutcome check_colors(const CheckContext& c, bool shard) {
  const char* which = shard ? "shard" : "replica";
  for (const auto& [world, s] : kShapes) {
    if (shard && s == world) continue;  // the engine splits no shard group when S = W
    std::vector<int> colors;
    for (int r = 0; r < world; ++r)
      colors.push_back(shard ? graded(c).shard_group_color(r, s) : graded(c).replica_group_color(r, s));
    std::string negative;
    const Groups got = groups_of(colors, negative);
    const Groups want = shard ? consecutive_blocks(world, s) : same_chunk(world, s);
    const Groups other = shard ? same_chunk(world, s) : consecutive_blocks(world, s);
    const std::string shape = "W = " + std::to_string(world) + ", S = " + std::to_string(s) + ": ";
    const std::string expected = shape + which + " groups " + groups_text(want) +
                                 (shard ? " (S consecutive ranks, a node, shard a unit together)"
                                        : " (the ranks holding the same chunk, one per shard group)");
    if (!negative.empty())
      return CheckOutcome::fail(expected, shape + negative,
                                "a negative colour: split refuses it (colours must be >= 0)");
    if (got == want) continue;
    const std::string got_text = shape + "your colours make the " + which + " groups " + groups_text(got);
    if (got == other && world != s && s != 1) {
      // Groups the other colour should make: this colour made with the other's formula, or the two swapped (the
      // other colour then makes this one's groups).
      std::vector<int> other_colors;
      for (int r = 0; r < world; ++r)
        other_colors.push_back(shard ? graded(c).replica_group_color(r, s) : graded(c).shard_group_color(r, s));
      std::string unused;
      const bool swapped = groups_of(other_colors, unused) == want;
      std::string cause;
      if (swapped)
        cause =
            "shard and replica colours swapped: rank % S shards a unit across nodes, so the big gathers leave "
            "the node's fast link; consecutive ranks shard together (rank / S)";
      else if (shard)
        cause =
            "the shard colour made like the replica colour (rank % S): a unit is then sharded across nodes, "
            "so the big gathers leave the node's fast link; consecutive ranks shard together (rank / S)";
      else
        cause =
            "the replica colour made like the shard colour (rank / S): the 'replica' all-reduce then averages "
            "different chunks inside a shard group; ranks holding the same chunk are rank % S";
      return CheckOutcome::fail(
          expected, got_text + (shard ? ", which are the replica groups" : ", which are the shard groups"), cause);
    }
    return CheckOutcome::fail(expected, got_text,
                              shard
                                  ? "ranks that shard a unit together must be S consecutive ranks: the same colour for "
                                    "rank / S, a different one across blocks"
                                  : "the replica group is the ranks holding the same chunk: one from each shard group, "
                                    "the same colour for the same rank % S");
  }
  return CheckOutcome::pass();
}

// ---- all_reduce_replicas ---------------------------------------------------------------------------

constexpr std::int64_t kShard = 10;  // gradient shard elements

// Element i of rank r's gradient shard, the mean over its shard group: a multiple of 1/8, so sums and
// means over a few ranks are exact.
float shard_mean(int rank, std::int64_t i) { return static_cast<float>((rank + 1) * (i % 5 + 1)) / 8; }

// What rank `rank`'s shard must become: the mean of shard_mean over its replica group (the ranks r % S).
double replica_mean(int rank, std::int64_t i, int world, int s) {
  double sum = 0;
  int n = 0;
  for (int q = rank % s; q < world; q += s, ++n) sum += shard_mean(q, i);
  return sum / n;
}

// A rank's view of one all_reduce_replicas call, on a replica group split with the reference's colours,
// behind 1 ms of reduce-scatter on its stream and, where `others_busy` > 0, that long a run of work on each other
// stream (so that a host sync of any stream shows on the host clock); then the work issued next on the other streams
// (the backward goes on): none of it needs the reduction, so none waits for it (waited_for: an event wait, read from
// its dependencies). The other streams' work is of category compute, which takes no link.
struct ReplicaCall {
  std::vector<float> before, after;
  std::vector<OpRecord> issued;
  std::vector<OpRecord> next_work;  // on the compute, all-gather and memcpy streams
  OpId reduce_scatter = 0;
  SimTime reduce_scatter_end = 0;
  SimTime host_before = 0, host_after = 0;
  std::int64_t bytes = 0;
};

std::vector<ReplicaCall> call_all_reduce(const CheckContext& c, int world, int s, SimTime others_busy = 0) {
  std::vector<ReplicaCall> calls(static_cast<std::size_t>(world));  // each rank writes its own
  on_ranks(world, [&](GradedRank& r) {
    ReplicaCall& call = calls[static_cast<std::size_t>(r.rank)];
    const std::unique_ptr<Communicator> replicas = r.comm.split(reference(c).replica_group_color(r.rank, s));
    const Tensor grad = Tensor::empty(r.device, {kShard}, DType::f32, MemTag::grad_shard,
                                      "transformer.h.0.flat_grad_shard", Lane::reduce_scatter);
    for (std::int64_t i = 0; i < kShard; ++i) call.before.push_back(shard_mean(r.rank, i));
    grad.copy_from(call.before);
    call.bytes = grad.nbytes();
    // The reduce-scatter that wrote the shard, still running when the call comes. It touches no memory, so an
    // all-reduce on the wrong stream shows in the op graph, named, instead of stopping the check as a race.
    const OpRecord reduce_scatter = busy_op(r.device, Lane::reduce_scatter, OpCategory::reduce_scatter,
                                            "reduce_scatter transformer.h.0.flat_grad_shard (1 ms)", 1'000'000);
    call.reduce_scatter = reduce_scatter.id;
    call.reduce_scatter_end = reduce_scatter.end;
    if (others_busy > 0)
      for (const Lane lane : {Lane::compute, Lane::all_gather, Lane::memcpy})
        busy_op(r.device, lane, OpCategory::compute, "work in flight", others_busy);
    const std::size_t first = r.device.ops().size();
    call.host_before = r.device.host_time();
    graded(c).all_reduce_replicas(r.device, *replicas, grad);
    call.host_after = r.device.host_time();
    call.issued = ops_since(r.device, first);
    call.next_work = {busy_op(r.device, Lane::compute, OpCategory::compute, "the next unit's backward", 10'000),
                      busy_op(r.device, Lane::all_gather, OpCategory::compute, "work on the all-gather stream", 10'000),
                      busy_op(r.device, Lane::memcpy, OpCategory::compute, "work on the memcpy stream", 10'000)};
    r.device.synchronize();
    call.after = grad.to_vector();
  });
  return calls;
}

bool all_near(const std::vector<float>& got, const std::vector<double>& want) {
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= 1e-6 * std::max(1.0, std::abs(want[i])))) return false;
  return true;
}

CheckOutcome check_mean(const CheckContext& c) {
  for (const auto& [world, s] : {std::pair{4, 2}, std::pair{6, 2}}) {
    const std::vector<ReplicaCall> calls = call_all_reduce(c, world, s);
    const int replicas = world / s;
    for (int r = 0; r < world; ++r) {
      const ReplicaCall& call = calls[static_cast<std::size_t>(r)];
      std::vector<double> mean, sum;
      for (std::int64_t i = 0; i < kShard; ++i) {
        mean.push_back(replica_mean(r, i, world, s));
        sum.push_back(replicas * mean.back());
      }
      if (all_near(call.after, mean)) continue;
      std::ostringstream expected, got;
      expected << "W = " << world << ", S = " << s << ": every rank's grad_shard the mean over its " << replicas
               << " replicas (rank " << r << "'s element 0: " << mean[0] << ")";
      got << "rank " << r << "'s element 0 is " << call.after[0];
      if (all_near(call.after, sum))
        return CheckOutcome::fail(
            expected.str(), got.str() + ", the sum over the replicas (" + std::to_string(replicas) + " x the mean)",
            "ReduceOp::sum instead of avg: the shard group's mean is averaged once more over the W / S "
            "replicas, else the gradient comes out W / S times too large (AdamW hides it, SGD does not)");
      if (call.after == call.before)
        return CheckOutcome::fail(
            expected.str(), got.str() + ", unchanged: the mean over its shard group only",
            "no all-reduce across the replica group: each shard group trains on its own part of the batch "
            "and the replicas drift apart from step 2");
      return CheckOutcome::fail(expected.str(), got.str(),
                                "the all-reduce is not an average of grad_shard over replica_group");
    }
  }
  return CheckOutcome::pass();
}

CheckOutcome check_stream(const CheckContext& c) {
  const std::vector<ReplicaCall> calls = call_all_reduce(c, 4, 2);
  const ReplicaCall& call = calls[0];
  const std::string expected = "one all_reduce of grad_shard (" + std::to_string(call.bytes) +
                               " B) on the reduce-scatter stream, behind the reduce-scatter that wrote it (stream "
                               "order), neither the host nor another stream waiting for it";
  const auto named = [](const OpRecord& op) {
    return "'" + op.name + "' (" + std::string(category_name(op.category)) + ", " + std::to_string(op.bytes_moved) +
           " B) on the " + std::string(lane_name(op.lane)) + " stream";
  };
  std::vector<const OpRecord*> collectives;
  for (const OpRecord& op : call.issued)
    if (is_communication(op.category)) collectives.push_back(&op);
  if (collectives.empty())
    return CheckOutcome::fail(
        expected, "rank 0 issued no collective",
        "no all-reduce across the replica group: the gradient stays the mean over S ranks, not W");
  const OpRecord& op = *collectives.front();
  if (collectives.size() != 1 || op.category != OpCategory::all_reduce || op.bytes_moved != call.bytes)
    return CheckOutcome::fail(
        expected, "rank 0 issued " + std::to_string(collectives.size()) + " collective(s), the first " + named(op),
        "one collective does it: replica_group.all_reduce(stream, grad_shard, ReduceOp::avg)");
  for (const OpRecord& other : call.issued)
    if (other.lane != Lane::reduce_scatter) {
      // What it breaks first: an op the reduce-scatter does not order is a race, whatever else it costs. (Not read
      // from the times: the replicas' all-reduce waits for the link the reduce-scatter holds, so it starts after it
      // here, ordered or not.)
      std::string cause = "the all-reduce on the " + std::string(lane_name(other.lane)) + " stream: ";
      if (!waited_for(other, call.reduce_scatter))
        cause +=
            "nothing orders it after the reduce-scatter that wrote grad_shard on its own stream (the race "
            "detector stops a training there); and ";
      cause += other.lane == Lane::compute
                   ? "compute waits for the replicas' link, so the next units' backward queues behind every all-reduce"
                   : "the engine's `reduced` event, recorded on the reduce-scatter stream, does not cover it, so the "
                     "optimizer may read grad_shard before it is reduced";
      return CheckOutcome::fail(
          expected,
          named(other) + ": not on the reduce-scatter stream, where the reduce-scatter that wrote grad_shard ran",
          cause);
    }
  // ReduceOp::avg divides in the collective: a scale before or after it is one more pass over the shard.
  if (call.issued.size() != 1) {
    const OpRecord& extra = call.issued[&call.issued.front() == &op ? 1 : 0];
    return CheckOutcome::fail(
        expected,
        "rank 0 issued " + std::to_string(call.issued.size()) + " ops, " + named(extra) + " besides the all-reduce",
        "the mean made in ops of its own (a sum, then a scale by 1 / replicas, or each gradient divided first): an "
        "elementwise pass more over grad_shard per unit on the reduce-scatter stream, and in bf16 a second rounding; "
        "ReduceOp::avg averages inside the collective",
        0.5);
  }
  // A host sync of any stream, with every other stream busy for 3 ms.
  const ReplicaCall busy = call_all_reduce(c, 4, 2, 3'000'000)[0];
  if (busy.host_after >= busy.reduce_scatter_end)
    return CheckOutcome::fail(
        expected,
        "the host clock went from " + ms(busy.host_before) + " to " + ms(busy.host_after) +
            " inside all_reduce_replicas (the reduce-scatter ends at " + ms(busy.reduce_scatter_end) +
            ", the other streams' work at " + ms(busy.host_before + 3'000'000) + ")",
        "a host wait (synchronize) where stream order suffices: the host stops issuing the backward");
  for (const OpRecord& next : call.next_work)
    if (waited_for(next, call.reduce_scatter) || waited_for(next, op.id))
      return CheckOutcome::fail(
          expected,
          "'" + next.name + "' on the " + std::string(lane_name(next.lane)) +
              " stream, issued after the call, waits for the reduction: it starts at " + ms(next.begin) +
              " (the reduce-scatter ends at " + ms(call.reduce_scatter_end) + ", " + named(op) + " at " + ms(op.end) +
              ")",
          "another stream made to wait for the reduce-scatter stream (a wait_stream or an event wait, before or after "
          "the all-reduce): the engine's `reduced` event, recorded behind the all-reduce, already orders the "
          "optimizer after the reduction, and this stream's next work no longer overlaps it" +
              std::string(next.lane == Lane::compute ? " (on compute: the next units' backward)" : ""),
          0.5);
  return CheckOutcome::pass();
}

GradeCase hybrid_case(int world, int s, bool sgd) {
  GradeCase c = small_gpt2(world);
  c.options.strategy = ShardingStrategy::hybrid_shard;
  c.options.hybrid_group = s;
  if (sgd) {
    c.run.optimizer = "sgd";
    c.run.lr = 0.1;
  }
  return c;
}

}  // namespace

std::vector<Check> hybrid_shard_checks() {
  const DifferenceCause direct_mistake =
      first_failing_cause({[](const CheckContext& c) { return check_colors(c, true); },
                           [](const CheckContext& c) { return check_colors(c, false); }, check_mean, check_stream});
  return {
      make(
          "shard-groups", "shard_group_color: S consecutive ranks per group, for W = 4, 6, 8 and S = 1 to 4", 2,
          [](const CheckContext& c) { return check_colors(c, true); }, kShowOnNodes),
      make(
          "replica-groups", "replica_group_color: the ranks holding the same chunk, one per shard group", 2,
          [](const CheckContext& c) { return check_colors(c, false); }, kShowOnNodes),
      // A sum where the mean belongs shows in the losses of an SGD training (AdamW's update hides the scale).
      make("replica-mean", "all_reduce_replicas leaves the mean over the replicas (not the sum), W = 4 and 6", 3,
           check_mean, hybrid_case(4, 2, true).command("gui", "{impl}")),
      make("replica-stream",
           "one all_reduce on the reduce-scatter stream, nothing waiting for it (op graph, virtual clock)", 2,
           check_stream, kShowCollectiveDone),
      equivalence_check(8, "training-W4-S2-sgd",
                        "gpt2 test-tiny, hybrid W = 4, S = 2, SGD: equal to the single-rank baseline", 3,
                        hybrid_case(4, 2, true),
                        "the gradient not the mean over all W ranks (no all-reduce across the replicas, a sum "
                        "instead of the mean, or replica groups that are not the ranks holding the same chunk); "
                        "when the race detector stopped it, the all-reduce is not on the reduce-scatter stream",
                        direct_mistake),
      equivalence_check(8, "training-W6-S3",
                        "gpt2 test-tiny, hybrid W = 6, S = 3, AdamW: equal to the single-rank baseline", 1,
                        hybrid_case(6, 3, false),
                        "the replica groups or their all-reduce wrong at W = 6, S = 3, which the checks above pass; "
                        "when the race detector stopped it, the all-reduce is not on the reduce-scatter stream",
                        direct_mistake),
  };
}

}  // namespace fsdplab::grading
