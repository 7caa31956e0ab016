// Task 6's schedule, read from the recorded op graph and the sim device's virtual clock — never wall
// time. GPT-2 124M (12 Blocks + the root) on 2 ranks, dry runs (time and memory only), step 2 of 2:
// the first step records the forward order that forward prefetch replays.
//   SYNC                    no collective overlaps any compute op
//   ASYNC, forward prefetch the gather of each unit but the first overlaps the compute of the unit
//                           before it (N-1 of N); the first, the root's, has nothing before it
//   ASYNC, backward-pre     every backward gather and every reduce-scatter but the last overlaps compute
//   ASYNC, no prefetch      backward gathers queue behind the previous unit's reduce-scatter on the
//                           link and overlap nothing (all but the first), as the lecture warns
//   rate limiter            at most K gathered Blocks hold memory (ledger), K = 1, 2; with no limit more
// Every mode gives bit-identical losses and parameters with real numerics (test-tiny, W = 2 and 3),
// and runs clean under the race detector; a planted missing event wait is reported with both ops.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/fsdp/fsdp_unit.hpp"
#include "engine/fsdp/memory_model.hpp"
#include "engine/fsdp/overlap_state.hpp"
#include "engine/runtime/error.hpp"
#include "engine/trace/chrome_trace.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/model_factory.hpp"
#include "fsdp_runs.hpp"

namespace fsdplab {
namespace {

namespace fs = std::filesystem;

constexpr int kWorld = 2;
constexpr int kMeasuredStep = 1;  // the second step

FsdpOptions overlap(OverlapMode mode, const std::string& prefetch, int max_inflight = 2,
                    UnshardBuffers buffers = UnshardBuffers::alloc) {
  FsdpOptions o;
  o.mode = mode;
  o.prefetch = parse_prefetch(prefetch);
  o.max_inflight = max_inflight;
  o.buffers = buffers;
  return o;
}

RunConfig gpt2_124m() {
  RunConfig run;
  run.model = "gpt2";
  run.preset = "gpt2";
  run.world = kWorld;
  run.batch = 2 * kWorld;
  run.seq = 512;
  run.steps = 2;
  return run;
}

struct RankSchedule {
  std::vector<OpRecord> ops;
  std::int64_t peak_param_full = 0;
};

// Each rank's op log and ledger after a dry run of `run` under `options`.
std::vector<RankSchedule> schedule_of(const RunConfig& run, const FsdpOptions& options) {
  FsdpRun fsdp;
  fsdp.run = run;
  fsdp.options = options;
  fsdp.dry_run = true;
  fsdp.keep_op_log = true;
  std::vector<RankSchedule> ranks(static_cast<std::size_t>(run.world));
  std::mutex mutex;
  fsdp.on_rank_done = [&](int r, Device& device) {
    const std::lock_guard<std::mutex> lock(mutex);
    ranks[static_cast<std::size_t>(r)] = {device.ops(), device.ledger().peak(MemTag::param_full)};
  };
  train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
  return ranks;
}

bool intersects(const OpRecord& a, const OpRecord& b) { return a.begin < b.end && b.begin < a.end; }

bool overlaps_compute(const OpRecord& op, const std::vector<OpRecord>& ops, int unit = -2) {
  return std::any_of(ops.begin(), ops.end(), [&](const OpRecord& c) {
    return c.category == OpCategory::compute && (unit == -2 || c.labels.unit == unit) && intersects(op, c);
  });
}

// Whether a compute op of `phase` runs beside `op`.
bool overlaps_phase(const OpRecord& op, const std::vector<OpRecord>& ops, const std::string& phase) {
  return std::any_of(ops.begin(), ops.end(), [&](const OpRecord& c) {
    return c.category == OpCategory::compute && c.labels.phase == phase && intersects(op, c);
  });
}

std::vector<OpRecord> collectives(const std::vector<OpRecord>& ops, OpCategory category, const std::string& phase) {
  std::vector<OpRecord> out;
  for (const OpRecord& op : ops)
    if (op.category == category && op.labels.step == kMeasuredStep && op.labels.phase == phase) out.push_back(op);
  std::sort(out.begin(), out.end(), [](const OpRecord& a, const OpRecord& b) { return a.begin < b.begin; });
  return out;
}

int count_overlapping(const std::vector<OpRecord>& collective_ops, const std::vector<OpRecord>& ops) {
  return static_cast<int>(std::count_if(collective_ops.begin(), collective_ops.end(),
                                        [&](const OpRecord& op) { return overlaps_compute(op, ops); }));
}

TEST(FsdpOverlap, SyncOverlapsNothing) {
  for (const RankSchedule& rank : schedule_of(gpt2_124m(), overlap(OverlapMode::sync, "none"))) {
    int collectives_seen = 0;
    for (const OpRecord& op : rank.ops) {
      if (!is_communication(op.category)) continue;
      ++collectives_seen;
      EXPECT_FALSE(overlaps_compute(op, rank.ops)) << op.name << " [" << op.begin << ", " << op.end << ")";
    }
    EXPECT_GT(collectives_seen, 50);
  }
}

TEST(FsdpOverlap, ForwardPrefetchOverlapsEveryGatherButTheFirst) {
  for (const RankSchedule& rank : schedule_of(gpt2_124m(), overlap(OverlapMode::async, "forward"))) {
    const std::vector<OpRecord> gathers = collectives(rank.ops, OpCategory::all_gather, "forward");
    ASSERT_EQ(gathers.size(), 13u);  // the root, then 12 Blocks
    EXPECT_EQ(gathers.front().labels.unit, 0);
    EXPECT_FALSE(overlaps_compute(gathers.front(), rank.ops)) << "nothing runs before the root's gather";
    // The gather of unit i+1 runs while unit i computes (units are numbered in forward order).
    for (std::size_t i = 1; i < gathers.size(); ++i) {
      const int unit = gathers[i].labels.unit;
      EXPECT_EQ(unit, static_cast<int>(i));
      EXPECT_TRUE(overlaps_compute(gathers[i], rank.ops, unit - 1)) << gathers[i].name << " does not overlap unit "
                                                                     << unit - 1 << "'s compute";
    }
    EXPECT_EQ(count_overlapping(gathers, rank.ops), 12);  // N - 1 of N
  }
}

TEST(FsdpOverlap, BackwardPrefetchOverlapsGathersAndReductions) {
  for (const char* policy : {"backward-pre", "backward-post"}) {
    for (const RankSchedule& rank : schedule_of(gpt2_124m(), overlap(OverlapMode::async, policy))) {
      const std::vector<OpRecord> gathers = collectives(rank.ops, OpCategory::all_gather, "backward");
      const std::vector<OpRecord> reductions = collectives(rank.ops, OpCategory::reduce_scatter, "backward");
      ASSERT_EQ(gathers.size(), 12u) << policy;  // the Blocks again; the root stayed gathered
      ASSERT_EQ(reductions.size(), 13u) << policy;
      EXPECT_EQ(count_overlapping(gathers, rank.ops), 12) << policy;
      // The last reduction (the root's) has no backward compute left to hide behind, but the other units'
      // optimizer updates run beside it: each waits for its own reduction only.
      EXPECT_EQ(count_overlapping(reductions, rank.ops), 13) << policy;
      EXPECT_EQ(reductions.back().labels.unit, 0) << policy;
      EXPECT_TRUE(overlaps_phase(reductions.back(), rank.ops, "optimizer")) << policy;
    }
  }
}

// [Note: the embedding's gradient as rows]: the root is reduced in 12 parts, one beside each Block's backward, and
// at the backward's end only the embedding's rows cross the link (ids and rows, all-gathered), beside nothing the
// backward has left but whose data they are.
TEST(FsdpOverlap, EmbeddingRowsReduceTheRootBesideTheBlocks) {
  FsdpOptions rows;
  rows.embedding_grad = EmbeddingGradient::rows;
  for (const RankSchedule& rank : schedule_of(gpt2_124m(), rows)) {
    std::vector<OpRecord> root_parts, blocks;
    for (const OpRecord& op : collectives(rank.ops, OpCategory::reduce_scatter, "backward"))
      (op.labels.unit == 0 ? root_parts : blocks).push_back(op);
    ASSERT_EQ(root_parts.size(), 12u);
    ASSERT_EQ(blocks.size(), 12u);
    // Each part runs beside a Block's backward compute, and the last part ends before the last Block's reduction.
    for (const OpRecord& part : root_parts) {
      bool beside_a_block = false;
      for (int unit = 1; unit <= 12; ++unit) beside_a_block = beside_a_block || overlaps_compute(part, rank.ops, unit);
      EXPECT_TRUE(beside_a_block) << part.name << " at " << part.begin;
    }
    EXPECT_LT(root_parts.back().end, blocks.back().end);
    // The embedding's rows: the ids and dx of both ranks, gathered after the last part; the last Block's reduction
    // is held until they are gathered.
    const std::vector<OpRecord> gathers = collectives(rank.ops, OpCategory::all_gather, "backward");
    std::vector<OpRecord> rows_gathered;
    for (const OpRecord& g : gathers)
      if (g.labels.unit == 0) rows_gathered.push_back(g);
    ASSERT_EQ(rows_gathered.size(), 2u);
    EXPECT_GE(rows_gathered.front().begin, root_parts.back().end);
    EXPECT_GE(blocks.back().begin, rows_gathered.back().end);
    // The root's update is the step's first, and its gather for the next step follows it, beside every other update.
    std::vector<OpRecord> next_gather, updates;
    for (const OpRecord& op : rank.ops) {
      if (op.labels.step != kMeasuredStep - 1 || op.labels.phase != "optimizer") continue;
      if (op.category == OpCategory::all_gather && op.labels.unit == 0) next_gather.push_back(op);
      if (op.category == OpCategory::compute) updates.push_back(op);
    }
    ASSERT_EQ(next_gather.size(), 1u);
    ASSERT_EQ(updates.size(), 13u);  // one multi-tensor AdamW launch per unit
    const auto before = std::count_if(updates.begin(), updates.end(),
                                      [&](const OpRecord& u) { return u.end <= next_gather.front().begin; });
    EXPECT_EQ(before, 1) << "updates before the root's gather";
  }
}

// [Note: per-unit optimizer steps]: the next step's first unit (the root) is gathered in the step before,
// beside the other units' updates, after its own update; the next forward waits for it like a prefetch.
TEST(FsdpOverlap, NextStepPrefetchGathersTheRootBesideTheUpdates) {
  for (const RankSchedule& rank : schedule_of(gpt2_124m(), FsdpOptions{})) {  // the defaults: backward-pre,next-step
    std::vector<OpRecord> early;  // the measured step's root gather, issued in the step before
    for (const OpRecord& op : rank.ops)
      if (op.category == OpCategory::all_gather && op.labels.unit == 0 && op.labels.step == kMeasuredStep - 1 &&
          op.labels.phase == "optimizer")
        early.push_back(op);
    ASSERT_EQ(early.size(), 1u);
    EXPECT_TRUE(overlaps_phase(early.front(), rank.ops, "optimizer")) << "no update runs beside the root's gather";
    // Its own update came first: an update of the step before ends before the gather starts and some
    // run after it.
    int before = 0, after = 0;
    for (const OpRecord& op : rank.ops)
      if (op.category == OpCategory::compute && op.labels.step == kMeasuredStep - 1 && op.labels.phase == "optimizer")
        (op.end <= early.front().begin ? before : after)++;
    EXPECT_GT(before, 0);
    EXPECT_GT(after, 0);
    // The measured step's forward gathers every unit but the root.
    const std::vector<OpRecord> gathers = collectives(rank.ops, OpCategory::all_gather, "forward");
    ASSERT_EQ(gathers.size(), 12u);
    for (const OpRecord& g : gathers) EXPECT_NE(g.labels.unit, 0) << g.name;
  }
  // The last step prepares nothing: a training's end leaves every unit sharded.
  for (const RankSchedule& rank : schedule_of(gpt2_124m(), FsdpOptions{}))
    for (const OpRecord& op : rank.ops)
      EXPECT_FALSE(op.category == OpCategory::all_gather && op.labels.step == kMeasuredStep &&
                   op.labels.phase == "optimizer")
          << op.name;
}

TEST(FsdpOverlap, WithoutBackwardPrefetchGathersWaitBehindReductions) {
  for (const RankSchedule& rank : schedule_of(gpt2_124m(), overlap(OverlapMode::async, "none"))) {
    const std::vector<OpRecord> gathers = collectives(rank.ops, OpCategory::all_gather, "backward");
    ASSERT_EQ(gathers.size(), 12u);
    // Only the first (the last Block's, issued while the root's head computes its gradient) overlaps.
    EXPECT_EQ(count_overlapping(gathers, rank.ops), 1);
  }
}

TEST(FsdpOverlap, RateLimiterBoundsTheGatheredUnits) {
  const RunConfig run = gpt2_124m();
  const BuiltModel built = build_model(run);
  const std::vector<UnitSize> units = plan_unit_sizes(*built.model, built.unit_kinds, FsdpOptions{}, kWorld);
  ASSERT_TRUE(units.front().root);
  const std::int64_t root = units.front().padded_numel * 4;
  const std::int64_t block = units.back().padded_numel * 4;
  for (int k : {1, 2, 3}) {
    for (const RankSchedule& rank : schedule_of(run, overlap(OverlapMode::async, "forward,backward-pre", k))) {
      EXPECT_LE(rank.peak_param_full, root + k * block) << "K = " << k;
      if (k > 1) {
        EXPECT_GT(rank.peak_param_full, root + (k - 1) * block) << "K = " << k << " was never used";
      }
    }
  }
  // Without the limiter the host runs ahead and gathers more Blocks than any K above allowed.
  for (const RankSchedule& rank : schedule_of(run, overlap(OverlapMode::async, "forward,backward-pre", 0)))
    EXPECT_GT(rank.peak_param_full, root + 3 * block);
  // The pool holds exactly two Blocks' buffers, whatever runs ahead.
  for (const RankSchedule& rank :
       schedule_of(run, overlap(OverlapMode::async, "forward,backward-pre", 2, UnshardBuffers::pool)))
    EXPECT_EQ(rank.peak_param_full, root + 2 * block);
  // The next-step prefetch gathers the root while its old buffer is still parked (the host cannot know
  // the embedding's backward is done): one root more, at the step's edge, outside the limiter.
  for (const RankSchedule& rank : schedule_of(run, overlap(OverlapMode::async, "all", 2)))
    EXPECT_LE(rank.peak_param_full, 2 * root + 2 * block);
}

// What a student opens in Perfetto: the Chrome trace JSON of an ASYNC run, read back as plain JSON (no
// fsdplab reader), shows on each rank the all-gather of unit i+1 running beside the compute of unit i.
TEST(FsdpOverlap, TraceJsonShowsTheNextGatherBesideTheCurrentCompute) {
  FsdpRun fsdp;
  fsdp.run = gpt2_124m();
  fsdp.options = overlap(OverlapMode::async, "forward,backward-pre");  // the root gathered in its own step
  fsdp.dry_run = true;
  std::vector<std::unique_ptr<TraceRecorder>> recorders;
  for (int r = 0; r < kWorld; ++r) {
    recorders.push_back(std::make_unique<TraceRecorder>());
    fsdp.sinks.push_back(recorders.back().get());
  }
  train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
  TraceData all;
  for (const auto& recorder : recorders) all.append(recorder->data());
  const fs::path path = fs::temp_directory_path() / ("fsdplab_overlap_trace_" + std::to_string(::getpid()) + ".json");
  TraceMeta meta;
  meta.world_size = kWorld;
  write_chrome_trace(path, all, meta);
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  fs::remove(path);

  struct Span {
    double begin, end;
  };
  // rank -> unit -> the forward spans of step 2, by category
  std::map<int, std::map<int, std::vector<Span>>> compute, gathers;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.value("ph", "") != "X" || !e.contains("args") || !e["args"].contains("step")) continue;
    const nlohmann::json& args = e["args"];
    if (args["step"] != kMeasuredStep || args.value("phase", "") != "forward") continue;
    const Span span{e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
    const std::string category = args["category"];
    if (category == "compute") compute[e["pid"]][args["unit"]].push_back(span);
    if (category == "all_gather") gathers[e["pid"]][args["unit"]].push_back(span);
  }
  ASSERT_EQ(gathers.size(), static_cast<std::size_t>(kWorld));
  for (const auto& [rank, by_unit] : gathers) {
    ASSERT_EQ(by_unit.size(), 13u) << "rank " << rank;
    for (const auto& [unit, spans] : by_unit) {
      if (unit == 0) continue;  // the root's gather opens the step
      const std::vector<Span>& previous = compute[rank][unit - 1];
      const bool beside = std::any_of(spans.begin(), spans.end(), [&](const Span& g) {
        return std::any_of(previous.begin(), previous.end(),
                           [&](const Span& c) { return g.begin < c.end && c.begin < g.end; });
      });
      EXPECT_TRUE(beside) << "rank " << rank << ": unit " << unit << "'s all-gather does not overlap unit " << unit - 1
                          << "'s compute";
    }
  }
}

// ---- real numerics: every mode computes the same thing, race-free ------------------------------------

struct Trained {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;
};

Trained train_tiny(int world, const FsdpOptions& options, const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("fsdplab_overlap_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  FsdpRun fsdp;
  fsdp.run = testing::gpt2_run(world, 6, 16, 4);
  fsdp.run.save_final = dir.string();
  fsdp.options = options;
  Trained out{testing::losses_of(train_fsdp(fsdp, PresetCatalog::builtin(), nullptr)), testing::read_params(dir)};
  fs::remove_all(dir);
  return out;
}

TEST(FsdpOverlap, EveryModeGivesBitIdenticalResults) {
  const std::vector<std::pair<std::string, FsdpOptions>> modes = {
      {"async_none", overlap(OverlapMode::async, "none")},
      {"async_all", overlap(OverlapMode::async, "all")},
      {"async_forward_post", overlap(OverlapMode::async, "forward,backward-post")},
      {"async_k1", overlap(OverlapMode::async, "all", 1)},
      {"async_unlimited", overlap(OverlapMode::async, "all", 0)},
      {"pool", overlap(OverlapMode::async, "all", 2, UnshardBuffers::pool)},
  };
  for (int world : {2, 3}) {
    const Trained sync = train_tiny(world, overlap(OverlapMode::sync, "none"), "sync");
    for (const auto& [name, options] : modes) {
      const Trained got = train_tiny(world, options, name);
      EXPECT_EQ(got.losses, sync.losses) << name << " W=" << world;
      EXPECT_EQ(got.params, sync.params) << name << " W=" << world;
    }
  }
}

// ---- a planted missing wait ---------------------------------------------------------------------------

// Task 3 with the classic bug: the gather is issued but the compute stream never waits for it.
class UnshardWithoutWait final : public ForwardTask {
 public:
  void all_gather(Device& device, Communicator& group, const Tensor& shard, const Tensor& full,
                  Event& gathered) const override {
    reference_forward().all_gather(device, group, shard, full, gathered);
  }
  void wait_for_unshard(Device&, const Event&) const override {}  // missing: device.wait(Lane::compute, gathered)
  bool reshard_after_forward(ShardingStrategy strategy, bool is_root) const override {
    return reference_forward().reshard_after_forward(strategy, is_root);
  }
};

// end_backward's given check refuses a unit still gathering (a prefetch the pass never used) with an error of its own
// type, which the grader tells from other errors; a unit gathered and in use is none of its business.
TEST(FsdpOverlap, APrefetchNeverUsedIsAnUnusedPrefetch) {
  FsdpUnit root, block;
  root.name = "(root)";
  block.name = "transformer.h.0";
  OverlapState s;
  s.units = {&root, &block};
  EXPECT_NO_THROW(check_prefetches_used(s));
  root.state = UnitState::unsharded;
  EXPECT_NO_THROW(check_prefetches_used(s));
  block.state = UnitState::gathering;
  try {
    check_prefetches_used(s);
    ADD_FAILURE() << "a unit still gathering passed";
  } catch (const UnusedPrefetch& e) {
    EXPECT_NE(std::string(e.what()).find("FSDP unit 'transformer.h.0' was prefetched in this pass but never used"),
              std::string::npos)
        << e.what();
  }
}

TEST(FsdpOverlap, RaceDetectorNamesAPlantedMissingWait) {
  const UnshardWithoutWait broken;
  FsdpRun fsdp;
  fsdp.run = gpt2_124m();
  fsdp.run.steps = 1;
  fsdp.dry_run = true;
  fsdp.tasks.forward = &broken;
  try {
    train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
    FAIL() << "a compute stream reading parameters nothing waited for went unnoticed";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("stream race"), std::string::npos) << message;
    // The first reader of the root's parameters, and the gather that writes them.
    EXPECT_NE(message.find("'embedding' on stream compute"), std::string::npos) << message;
    EXPECT_NE(message.find("'all_gather (root).flat_param_full' on stream all_gather"), std::string::npos) << message;
    EXPECT_NE(message.find("no event orders the two"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace fsdplab
