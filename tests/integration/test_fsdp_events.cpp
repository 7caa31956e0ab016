// The FSDP events a rank tells its observer (fsdp_observer.hpp), read back from a recording observer
// per rank: gpt2 test-small (the root and 4 Blocks), W = 2, 2 steps, ASYNC with forward and backward-pre
// prefetch, so the second step prefetches in both passes.
//   hooks        every unit's pre-forward, post-forward, pre-backward, post-backward once a step, in
//                that order, forward before backward, each with the state its task left the unit in
//   collectives  each "issued" is followed at once by its "done", which carries the virtual [begin, end]
//                of the very op in the rank's op log; every collective op of the run is reported
//   attribution  a unit's own gather is its hook's task (3 in pre-forward, 4 in pre-backward); a gather
//                of another unit is a prefetch, task 6; reductions task 4; the ZeRO optimizer's gathers
//                task 5; the loss all-reduce task 7
//   optimizer    one optimizer step a step and rank, task 5, after the last post-backward
//   numerics     a run with observers has the very losses of one without
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "engine/train/fsdp_trainer.hpp"
#include "fsdp_event_recorder.hpp"
#include "fsdp_runs.hpp"

namespace fsdplab {
namespace {

using testing::losses_of;

constexpr int kWorld = 2;
constexpr int kSteps = 2;
constexpr std::size_t kUnits = 5;  // test-small: the root and 4 Blocks
// Where the reference tasks' classes are, as the events name them: the file from the repository's top and
// the line of the class.
const std::string forward_file = reference_forward().where();
const std::string backward_file = reference_backward().where();

TEST(FsdpEvents, CodeSitesNameTheImplementingClassByFileAndLine) {
  for (const FsdpTask* task : {static_cast<const FsdpTask*>(&reference_forward()),
                               static_cast<const FsdpTask*>(&reference_overlap())}) {
    const std::string where = task->where();
    const std::string file = task == &reference_forward() ? "engine/fsdp/forward_reference.cpp:"
                                                           : "engine/fsdp/overlap_reference.cpp:";
    ASSERT_EQ(where.rfind(file, 0), 0u) << where;
    EXPECT_GT(std::stoi(where.substr(file.size())), 1) << where;
  }
}

FsdpRun prefetching_run() {
  FsdpRun fsdp;
  fsdp.run = testing::gpt2_run(kWorld, 4, 16, kSteps, "test-small");
  fsdp.options.prefetch = parse_prefetch("all");
  return fsdp;
}

struct Observed {
  std::vector<std::vector<FsdpEvent>> events;  // by rank, in the order the rank told them
  std::vector<std::vector<OpRecord>> ops;      // by rank
  std::vector<double> losses;
};

Observed observe(FsdpRun fsdp) {
  const auto recorders = testing::record_events(fsdp);
  fsdp.keep_op_log = true;
  Observed out;
  out.ops.resize(static_cast<std::size_t>(fsdp.run.world));
  std::mutex mutex;
  fsdp.on_rank_done = [&](int r, Device& device) {
    const std::lock_guard lock(mutex);
    out.ops[static_cast<std::size_t>(r)] = device.ops();
  };
  out.losses = losses_of(train_fsdp(fsdp, PresetCatalog::builtin(), nullptr));
  for (const auto& recorder : recorders) out.events.push_back(recorder->events());
  return out;
}

const Observed& prefetching() {
  static const Observed observed = observe(prefetching_run());
  return observed;
}

bool is_hook(FsdpEventKind kind) { return kind <= FsdpEventKind::post_backward; }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The first hook event after position `i`: the hook whose task call issued a collective at `i`.
const FsdpEvent* next_hook(const std::vector<FsdpEvent>& events, std::size_t i) {
  for (std::size_t j = i + 1; j < events.size(); ++j)
    if (is_hook(events[j].kind)) return &events[j];
  return nullptr;
}

TEST(FsdpEvents, EveryUnitsHooksComeOnceAStepInOrder) {
  const std::vector<FsdpEventKind> hook_order = {FsdpEventKind::pre_forward, FsdpEventKind::post_forward,
                                                 FsdpEventKind::pre_backward, FsdpEventKind::post_backward};
  for (int r = 0; r < kWorld; ++r) {
    const std::vector<FsdpEvent>& events = prefetching().events[static_cast<std::size_t>(r)];
    for (int step = 0; step < kSteps; ++step) {
      std::vector<std::vector<FsdpEventKind>> by_unit(kUnits);
      std::size_t last_forward = 0, first_backward = events.size();
      for (std::size_t i = 0; i < events.size(); ++i) {
        const FsdpEvent& e = events[i];
        EXPECT_EQ(e.rank, r);
        if (e.step != step || !is_hook(e.kind)) continue;
        ASSERT_GE(e.unit, 0);
        ASSERT_LT(static_cast<std::size_t>(e.unit), kUnits);
        by_unit[static_cast<std::size_t>(e.unit)].push_back(e.kind);
        const bool forward = e.kind == FsdpEventKind::pre_forward || e.kind == FsdpEventKind::post_forward;
        if (forward) {
          last_forward = i;
        } else {
          first_backward = std::min(first_backward, i);
        }
        EXPECT_EQ(e.task, forward ? 3 : 4) << fsdp_event_name(e.kind);
        // The task methods the hook ran, and the class that implements them (the reference's here).
        const std::string methods = e.kind == FsdpEventKind::pre_forward ? "ForwardTask::all_gather, wait_for_unshard"
                                    : e.kind == FsdpEventKind::post_forward ? "ForwardTask::reshard_after_forward"
                                    : e.kind == FsdpEventKind::pre_backward ? "BackwardTask::zero_gradient"
                                                                            : "BackwardTask::reduce_scatter";
        EXPECT_EQ(e.code, methods + " (in the class at " + (forward ? forward_file : backward_file) + ")");
        EXPECT_EQ(e.unit_name, e.unit == 0 ? "(root)" : "transformer.h." + std::to_string(e.unit - 1));
        // The state the task left: the root stays gathered from its forward to the end of its backward.
        const bool gathered = e.kind == FsdpEventKind::pre_forward || e.kind == FsdpEventKind::pre_backward ||
                              (e.kind == FsdpEventKind::post_forward && e.unit == 0);
        EXPECT_EQ(e.unit_state, gathered ? UnitState::unsharded : UnitState::sharded)
            << fsdp_event_name(e.kind) << " of unit " << e.unit;
        EXPECT_FALSE(e.what.empty());
      }
      for (std::size_t u = 0; u < kUnits; ++u)
        EXPECT_EQ(by_unit[u], hook_order) << "rank " << r << " step " << step << " unit " << u;
      EXPECT_LT(last_forward, first_backward) << "rank " << r << " step " << step;
    }
  }
}

TEST(FsdpEvents, EachCollectiveIssuedIsDoneAtOnceWithItsOpsVirtualTimes) {
  for (int r = 0; r < kWorld; ++r) {
    const std::vector<FsdpEvent>& events = prefetching().events[static_cast<std::size_t>(r)];
    const std::vector<OpRecord>& ops = prefetching().ops[static_cast<std::size_t>(r)];
    const auto collective_ops = std::count_if(ops.begin(), ops.end(), [](const OpRecord& op) {
      return is_communication(op.category);
    });
    int done = 0;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const FsdpEvent& issued = events[i];
      if (issued.kind == FsdpEventKind::collective_done) {
        ADD_FAILURE() << "rank " << r << ": a collective done at event " << i << " that was not issued just before";
      }
      if (issued.kind != FsdpEventKind::collective_issued) continue;
      ASSERT_LT(i + 1, events.size());
      const FsdpEvent& finished = events[++i];
      ASSERT_EQ(finished.kind, FsdpEventKind::collective_done) << issued.what;
      EXPECT_EQ(finished.collective, issued.collective);
      EXPECT_EQ(finished.unit, issued.unit);
      EXPECT_EQ(finished.bytes, issued.bytes);
      EXPECT_EQ(finished.task, issued.task);
      EXPECT_EQ(finished.code, issued.code);
      EXPECT_GT(issued.bytes, 0);
      EXPECT_EQ(issued.device_begin, 0);
      EXPECT_EQ(issued.device_end, 0);
      EXPECT_LT(finished.device_begin, finished.device_end) << finished.what;
      EXPECT_GE(finished.host_time, issued.host_time);
      const bool has_op = std::any_of(ops.begin(), ops.end(), [&](const OpRecord& op) {
        return is_communication(op.category) && category_name(op.category) == finished.collective &&
               op.begin == finished.device_begin && op.end == finished.device_end && op.labels.unit == finished.unit &&
               op.labels.step == finished.step && op.bytes_moved == finished.bytes;
      });
      EXPECT_TRUE(has_op) << "rank " << r << ": no op for " << finished.what;
      ++done;
    }
    EXPECT_EQ(done, collective_ops) << "rank " << r << ": every collective op of the run is reported once";
  }
}

TEST(FsdpEvents, CollectivesAreAttributedToTheTaskWhoseCodeIssuedThem) {
  for (int r = 0; r < kWorld; ++r) {
    const std::vector<FsdpEvent>& events = prefetching().events[static_cast<std::size_t>(r)];
    int own_gathers = 0, forward_prefetches = 0, backward_prefetches = 0, next_step_gathers = 0, reductions = 0,
        loss_reductions = 0;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const FsdpEvent& e = events[i];
      if (e.kind != FsdpEventKind::collective_issued) continue;
      const FsdpEvent* hook = next_hook(events, i);
      if (e.collective == "all_gather") {
        ASSERT_NE(hook, nullptr);
        if (hook->step == e.step + 1) {
          // Issued in step e.step's optimizer step for the next forward's first unit (the next-step prefetch).
          ++next_step_gathers;
          EXPECT_EQ(hook->kind, FsdpEventKind::pre_forward) << e.what;
          EXPECT_EQ(hook->unit, e.unit) << e.what;
          EXPECT_EQ(e.task, 6) << e.what;
          EXPECT_TRUE(contains(e.code, "the next step's first unit")) << e.code;
          continue;
        }
        ASSERT_EQ(hook->step, e.step);
        if (hook->unit == e.unit) {
          ++own_gathers;
          const bool forward = hook->kind == FsdpEventKind::pre_forward;
          EXPECT_TRUE(forward || hook->kind == FsdpEventKind::pre_backward) << e.what;
          EXPECT_EQ(e.task, forward ? 3 : 4) << e.what;
          EXPECT_EQ(e.code, hook->code);
        } else {
          (hook->kind == FsdpEventKind::pre_forward ? forward_prefetches : backward_prefetches)++;
          EXPECT_EQ(e.task, 6) << e.what;
          EXPECT_EQ(e.code, "OverlapTask::after (in the class at " + reference_overlap().where() + ")");
          EXPECT_TRUE(contains(e.what, "ahead of its use")) << e.what;
        }
      } else if (e.collective == "reduce_scatter") {
        ++reductions;
        ASSERT_NE(hook, nullptr);
        EXPECT_EQ(hook->kind, FsdpEventKind::post_backward);
        EXPECT_EQ(hook->unit, e.unit);
        EXPECT_EQ(e.task, 4);
        EXPECT_EQ(e.code, "BackwardTask::reduce_scatter (in the class at " + backward_file + ")");
      } else {
        ++loss_reductions;
        EXPECT_EQ(e.collective, "all_reduce");
        EXPECT_EQ(e.unit, -1);
        EXPECT_EQ(e.task, 7);
        EXPECT_EQ(e.code, "train_fsdp: the loss all-reduce (engine/train/fsdp_trainer.cpp)");
      }
    }
    // Step 0 gathers each unit in pre-forward; step 1 prefetches every Block but the first in forward
    // (the first is gathered by the root's pre-forward, which ran before anything could be known), and
    // the backward prefetches the Blocks before the last.
    EXPECT_GT(own_gathers, 0);
    EXPECT_GT(forward_prefetches, 0);
    EXPECT_GT(backward_prefetches, 0);
    EXPECT_EQ(next_step_gathers, kSteps - 1);  // every step but the last prepares the next one's forward
    EXPECT_EQ(reductions, static_cast<int>(kUnits) * kSteps);
    EXPECT_EQ(loss_reductions, kSteps);
  }
}

TEST(FsdpEvents, OneOptimizerStepAStepAfterTheLastPostBackward) {
  for (int r = 0; r < kWorld; ++r) {
    const std::vector<FsdpEvent>& events = prefetching().events[static_cast<std::size_t>(r)];
    for (int step = 0; step < kSteps; ++step) {
      int steps_seen = 0;
      std::size_t last_post_backward = 0, optimizer_at = 0;
      for (std::size_t i = 0; i < events.size(); ++i) {
        const FsdpEvent& e = events[i];
        if (e.step != step) continue;
        if (e.kind == FsdpEventKind::post_backward) last_post_backward = i;
        if (e.kind != FsdpEventKind::optimizer_step) continue;
        ++steps_seen;
        optimizer_at = i;
        EXPECT_EQ(e.task, 5);
        EXPECT_EQ(e.unit, -1);
        EXPECT_EQ(e.code, "ShardedOptimizerTask::step (in the class at " + reference_sharded_optimizer().where() + ")");
        EXPECT_TRUE(contains(e.what, "adamw updated this rank's f32 shards of 5 units")) << e.what;
      }
      EXPECT_EQ(steps_seen, 1) << "rank " << r << " step " << step;
      EXPECT_GT(optimizer_at, last_post_backward);
    }
  }
}

TEST(FsdpEvents, WhatSaysWhatTheCodeDid) {
  const std::vector<FsdpEvent>& events = prefetching().events[0];
  const auto find = [&](int step, FsdpEventKind kind, int unit) -> const FsdpEvent& {
    const auto it = std::find_if(events.begin(), events.end(), [&](const FsdpEvent& e) {
      return e.step == step && e.kind == kind && e.unit == unit;
    });
    EXPECT_NE(it, events.end());
    return *it;
  };
  // 4 Blocks of test-small, f32: each Block's flat parameter is its padded size in f32 bytes.
  EXPECT_TRUE(contains(find(0, FsdpEventKind::pre_forward, 1).what,
                       "gathered unit 1 'transformer.h.0' (")) << find(0, FsdpEventKind::pre_forward, 1).what;
  EXPECT_TRUE(contains(find(0, FsdpEventKind::pre_forward, 1).what,
                       " f32) on the all_gather stream; compute waits on its event"));
  EXPECT_TRUE(contains(find(1, FsdpEventKind::pre_forward, 2).what, "unit 2 'transformer.h.1' was prefetched earlier"))
      << find(1, FsdpEventKind::pre_forward, 2).what;
  EXPECT_TRUE(contains(find(1, FsdpEventKind::pre_forward, 1).what, "; prefetched unit 2 'transformer.h.1' ("))
      << find(1, FsdpEventKind::pre_forward, 1).what;
  EXPECT_TRUE(contains(find(0, FsdpEventKind::post_forward, 1).what,
                       "resharded unit 1 'transformer.h.0': released its gathered parameters"));
  EXPECT_TRUE(
      contains(find(0, FsdpEventKind::post_forward, 0).what, "unit 0 '(root)' stays gathered until its backward"));
  EXPECT_TRUE(contains(find(0, FsdpEventKind::post_backward, 1).what,
                       "reduce-scattered unit 1 'transformer.h.0''s gradient ("))
      << find(0, FsdpEventKind::post_backward, 1).what;
  EXPECT_TRUE(contains(find(0, FsdpEventKind::collective_done, 1).what, "all_gather of unit 1 'transformer.h.0' ("))
      << find(0, FsdpEventKind::collective_done, 1).what;
  EXPECT_TRUE(contains(find(0, FsdpEventKind::collective_done, 1).what, " on the device clock ("));
}

TEST(FsdpEvents, ObservingLeavesTheLossesBitForBit) {
  FsdpRun plain = prefetching_run();
  const std::vector<double> losses = losses_of(train_fsdp(plain, PresetCatalog::builtin(), nullptr));
  EXPECT_EQ(prefetching().losses, losses);
}

TEST(FsdpEvents, TheZeroOptimizersGathersAreTask5s) {
  FsdpRun fsdp = prefetching_run();
  fsdp.run.steps = 1;
  fsdp.options.strategy = ShardingStrategy::zero2;
  const Observed observed = observe(fsdp);
  int gathers = 0;
  for (const FsdpEvent& e : observed.events[0]) {
    // The step's event, after all_gather_updates, counts its gathers.
    if (e.kind == FsdpEventKind::optimizer_step) {
      EXPECT_TRUE(contains(e.what, "; all-gathered the updated chunks of " + std::to_string(kUnits) + " units"))
          << e.what;
    }
    if (e.kind != FsdpEventKind::collective_issued || e.collective != "all_gather") continue;
    ++gathers;
    EXPECT_EQ(e.task, 5) << e.what;
    EXPECT_EQ(e.code, "ShardedOptimizerTask::all_gather_updates (in the class at " +
                          reference_sharded_optimizer().where() + ")");
  }
  EXPECT_EQ(gathers, static_cast<int>(kUnits));  // zero2 keeps the parameters whole: only the updated chunks move
}

TEST(FsdpEvents, TheClippingNormsAllReduceIsTask5sAndTheStepSaysIt) {
  FsdpRun fsdp = prefetching_run();
  fsdp.run.steps = 1;
  fsdp.run.clip_grad_norm = 0.5;
  const Observed observed = observe(fsdp);
  int norms = 0, steps = 0;
  for (const FsdpEvent& e : observed.events[0]) {
    if (e.kind == FsdpEventKind::optimizer_step) {
      ++steps;
      EXPECT_TRUE(contains(e.what,
                           "clipped the gradient shards to 2-norm <= 0.5, the squared norm all-reduced once "
                           "over the shard group; adamw updated"))
          << e.what;
    }
    if (e.kind != FsdpEventKind::collective_issued || e.collective != "all_reduce" || e.task != 5) continue;
    ++norms;
    EXPECT_EQ(e.code,
              "ShardedOptimizerTask::clip_grad_norm (in the class at " + reference_sharded_optimizer().where() + ")");
  }
  EXPECT_EQ(steps, 1);
  EXPECT_EQ(norms, 1);  // one scalar all-reduce a step, whatever the units
}

TEST(FsdpEvents, TheHybridAllReducesAcrossReplicasAreTask8s) {
  FsdpRun fsdp = prefetching_run();
  fsdp.run.steps = 1;
  fsdp.run.world = 4;
  fsdp.options.strategy = ShardingStrategy::hybrid_shard;
  fsdp.options.hybrid_group = 2;
  const Observed observed = observe(fsdp);
  int across = 0;
  for (const FsdpEvent& e : observed.events[0]) {
    if (e.kind != FsdpEventKind::collective_issued || e.collective != "all_reduce" || e.unit < 0) continue;
    ++across;
    EXPECT_EQ(e.task, 8) << e.what;
    EXPECT_EQ(e.code,
              "HybridShardTask::all_reduce_replicas (in the class at " + reference_hybrid_shard().where() + ")");
  }
  EXPECT_EQ(across, static_cast<int>(kUnits));  // one per unit's gradient shard; the loss's has no unit
  // The unit's post-backward event still tells the whole reduction.
  const auto post_backward = std::find_if(observed.events[0].begin(), observed.events[0].end(), [](const FsdpEvent& e) {
    return e.kind == FsdpEventKind::post_backward;
  });
  ASSERT_NE(post_backward, observed.events[0].end());
  EXPECT_TRUE(contains(post_backward->what, "then all-reduced across the replica group")) << post_backward->what;
}

TEST(FsdpEvents, TheEmbeddingRowsEventsTellThePartsAndTheHeldReduction) {
  FsdpRun fsdp = prefetching_run();
  fsdp.run.steps = 1;
  fsdp.options.embedding_grad = EmbeddingGradient::rows;
  const Observed observed = observe(fsdp);
  const std::vector<FsdpEvent>& events = observed.events[0];
  const auto post_backward = [&](int unit) {
    const auto it = std::find_if(events.begin(), events.end(), [&](const FsdpEvent& e) {
      return e.kind == FsdpEventKind::post_backward && e.unit == unit;
    });
    return it == events.end() ? std::string() : it->what;
  };
  EXPECT_TRUE(contains(post_backward(0),
                       "reduce-scattered unit 0 '(root)''s gradient in 4 parts beside the inner "
                       "units' backward, and added the embedding's rows, gathered from 2 ranks"))
      << post_backward(0);
  // The backward ends with the first Block: its reduction waits for the rows, and is issued in the root's backward,
  // task 4's code all the same.
  EXPECT_TRUE(contains(post_backward(1), "held unit 1 'transformer.h.0''s reduce-scatter until the embedding's rows"))
      << post_backward(1);
  EXPECT_TRUE(contains(post_backward(2), "reduce-scattered unit 2 'transformer.h.1''s gradient (")) << post_backward(2);
  int held = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const FsdpEvent& e = events[i];
    if (e.kind != FsdpEventKind::collective_issued || e.collective != "reduce_scatter" || e.unit != 1) continue;
    ++held;
    EXPECT_EQ(e.task, 4);
    EXPECT_EQ(e.code, "BackwardTask::reduce_scatter (in the class at " + backward_file + ")");
    const FsdpEvent* hook = next_hook(events, i);
    ASSERT_NE(hook, nullptr);
    EXPECT_EQ(hook->unit, 0) << "issued after the rows, in the root's backward";
  }
  EXPECT_EQ(held, 1);
}

TEST(FsdpEvents, OneObserverPerRankOrNone) {
  FsdpRun fsdp = prefetching_run();
  testing::FsdpEventRecorder only_one;
  fsdp.observers = {&only_one};
  EXPECT_TRUE(contains(testing::refusal_of(fsdp), "1 FSDP observers for 2 ranks; expected one per rank or none"));
}

}  // namespace
}  // namespace fsdplab
