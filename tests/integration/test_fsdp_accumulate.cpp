// Gradient accumulation without synchronisation (--accumulate N): each rank runs its rows as N
// micro-batches, backward adds each into the units' full gradients, and only the last reduces them
// (PyTorch's no_sync). It trains like the baseline on the whole batch (losses within 1e-5 relative
// — the micro-batch means are summed, not the rows, so rounding differs), sends a reduce-scatter per
// unit per step instead of per micro-batch, and pays for it in memory: every unit's full gradient is
// held from its first micro-batch's backward to the last (the ledger's grad_full peak).
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "engine/fsdp/memory_model.hpp"
#include "engine/runtime/error.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/model_factory.hpp"
#include "fsdp_runs.hpp"

namespace fsdplab {
namespace {

using testing::losses_of;

RunConfig gpt2_tiny(int world, int accumulate) {
  RunConfig run = testing::gpt2_run(world, 12, 16, 10);
  run.accumulate = accumulate;
  return run;
}

struct Case {
  int world;
  int accumulate;
  ShardingStrategy strategy;
  OverlapMode mode;
};

class FsdpAccumulate : public ::testing::TestWithParam<Case> {};

TEST_P(FsdpAccumulate, TrainsLikeTheBaselineOnTheWholeBatch) {
  const Case c = GetParam();
  const std::vector<double> base =
      losses_of(train_baseline(gpt2_tiny(1, 1), PresetCatalog::builtin(), nullptr, nullptr));
  FsdpRun fsdp;
  fsdp.run = gpt2_tiny(c.world, c.accumulate);
  fsdp.options.strategy = c.strategy;
  if (c.mode == OverlapMode::sync) fsdp.options = sync_schedule(fsdp.options);
  fsdp.keep_op_log = true;
  std::mutex mutex;
  std::vector<int> reductions;
  fsdp.on_rank_done = [&](int, Device& device) {
    int n = 0;
    for (const OpRecord& op : device.ops())
      n += op.labels.step == 0 && (op.category == OpCategory::reduce_scatter || op.category == OpCategory::all_reduce);
    const std::lock_guard<std::mutex> lock(mutex);
    reductions.push_back(n);
  };
  const std::vector<double> losses = losses_of(train_fsdp(fsdp, PresetCatalog::builtin(), nullptr));
  ASSERT_EQ(losses.size(), base.size());
  for (std::size_t i = 0; i < base.size(); ++i)
    EXPECT_LE(std::abs(losses[i] - base[i]) / std::abs(base[i]), 1e-5) << "step " << i;
  // One reduction per unit (3: the root and 2 Blocks) and the loss's all-reduce, whatever N is.
  ASSERT_EQ(reductions.size(), static_cast<std::size_t>(c.world));
  for (int n : reductions) EXPECT_EQ(n, 3 + 1);
}

INSTANTIATE_TEST_SUITE_P(Cases, FsdpAccumulate,
                         ::testing::Values(Case{2, 2, ShardingStrategy::full_shard, OverlapMode::async},
                                           Case{2, 3, ShardingStrategy::full_shard, OverlapMode::sync},
                                           Case{3, 4, ShardingStrategy::shard_grad_op, OverlapMode::async},
                                           Case{2, 2, ShardingStrategy::no_shard, OverlapMode::async},
                                           Case{2, 2, ShardingStrategy::zero2, OverlapMode::async}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return "W" + std::to_string(info.param.world) + "_N" +
                                  std::to_string(info.param.accumulate) + "_" +
                                  std::string(strategy_name(info.param.strategy)) + "_" +
                                  std::string(overlap_mode_name(info.param.mode));
                         });

// SYNC, full_shard: one Block's full gradient at a time without accumulation; with it, every unit's.
TEST(FsdpAccumulateMemory, HoldsEveryUnitsFullGradientBetweenMicroBatches) {
  const auto grad_full_peak = [](int accumulate) {
    RunConfig run = gpt2_tiny(2, accumulate);
    run.preset = "test-small";
    std::int64_t peak = 0;
    for (const TagBytes& rank : testing::ledger_peaks(testing::sync_dry_run(run)))
      peak = std::max(peak, testing::at(rank, MemTag::grad_full));
    return peak;
  };
  std::int64_t all = 0, root = 0, block = 0;
  RunConfig small = gpt2_tiny(2, 1);
  small.preset = "test-small";
  const BuiltModel sized = build_model(small);
  for (const UnitSize& u : plan_unit_sizes(*sized.model, sized.unit_kinds, FsdpOptions{}, 2)) {
    all += 4 * u.padded_numel;
    (u.root ? root : block) = 4 * u.padded_numel;
  }
  EXPECT_EQ(grad_full_peak(1), root + block);
  EXPECT_EQ(grad_full_peak(2), all);
}

TEST(FsdpAccumulateMemory, RefusesRowsThatDoNotSplit) {
  FsdpRun fsdp;
  fsdp.run = gpt2_tiny(2, 4);  // 6 rows per rank
  const std::string refusal = testing::refusal_of(fsdp);
  EXPECT_NE(refusal.find("each rank's 6 rows must split evenly"), std::string::npos) << refusal;
}

}  // namespace
}  // namespace fsdplab
