// Task 3, forward: pre_forward all-gathers a unit (one all-gather op on the all-gather stream, which
// the compute stream waits for) into its full buffer, and the parameters become views of it holding
// the whole initial values (rounded to bf16 under bf16 params); post_forward frees the full buffer
// when the unit reshards after forward and keeps it otherwise (shard_grad_op, the root); replicated
// strategies gather nothing; and the model's own forward, through the hooks, gathers one unit at a
// time and computes the baseline's loss.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/nn/gpt2_model.hpp"
#include "engine/nn/toy_model.hpp"
#include "engine/tensor/elementwise.hpp"
#include "fsdp_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

const std::vector<std::string> kToyUnits = {"Linear", "LayerNorm"};  // fc1, ln, fc2; the root has none left

std::unique_ptr<Model> toy() { return std::make_unique<ToyModel>(); }
std::unique_ptr<Model> gpt2_tiny() { return std::make_unique<Gpt2Model>(gpt2_preset("test-tiny")); }

FsdpOptions with_strategy(ShardingStrategy strategy, DType param_dtype = DType::f32) {
  return make_options(strategy, 0, param_dtype);
}

// Every parameter of the gathered `unit` is a view into unit.full at its layout offset, with its own
// shape, holding `expected` (by name).
void expect_views_hold(const FsdpUnit& unit, const std::map<std::string, std::vector<float>>& expected, DType dtype) {
  for (const FlatParamEntry& e : unit.layout.entries) {
    const Parameter& p = *e.param;
    ASSERT_TRUE(p.value.has_data()) << p.name;
    EXPECT_EQ(&p.value.storage(), &unit.full.storage()) << p.name;
    EXPECT_EQ(p.value.offset(), unit.full.offset() + e.offset) << p.name;
    EXPECT_EQ(p.value.shape(), p.shape) << p.name;
    EXPECT_EQ(p.value.dtype(), dtype) << p.name;
    EXPECT_EQ(read(p.value), expected.at(p.name)) << p.name;
  }
}

void check_gather_and_reshard(int world) {
  SCOPED_TRACE("W " + std::to_string(world));
  const auto baseline = baseline_values(toy, 5);
  with_fsdp_ranks(
      world, with_strategy(ShardingStrategy::full_shard), toy, kToyUnits,
      [&](FsdpTestRank& t) {
        UnitLifecycle& forward = t.sharded.lifecycle();
        const MemoryLedger& ledger = t.device.ledger();
        ASSERT_EQ(t.sharded.units().size(), 3u);
        for (FsdpUnit* unit : t.sharded.units()) {
          SCOPED_TRACE(unit->name);
          EXPECT_TRUE(unit->reshard_after_forward);
          EXPECT_EQ(unit->state, UnitState::sharded);
          const std::size_t ops_before = t.device.ops().size();
          forward.pre_forward(*unit);
          EXPECT_EQ(unit->state, UnitState::unsharded);
          EXPECT_EQ(ledger.live(MemTag::param_full), unit->layout.padded_numel * 4);
          expect_views_hold(*unit, baseline, DType::f32);
          // One all-gather, on its own stream, of the whole f32 unit.
          EXPECT_EQ(count_ops(t.device, OpCategory::all_gather, Lane::all_gather, ops_before), 1);
          EXPECT_EQ(count_ops(t.device, OpCategory::all_gather, ops_before), 1);
          const auto found = std::find_if(t.device.ops().begin() + static_cast<std::ptrdiff_t>(ops_before),
                                          t.device.ops().end(),
                                          [](const OpRecord& op) { return op.category == OpCategory::all_gather; });
          ASSERT_NE(found, t.device.ops().end());
          const OpRecord gather = *found;  // a copy: launching more ops may move the log
          EXPECT_EQ(gather.lane, Lane::all_gather);
          EXPECT_EQ(gather.bytes_moved, unit->layout.padded_numel * 4);
          const OpRef gather_ref{t.r, gather.id};
          // The compute stream waits for it: the next compute op depends on the gather and starts after it.
          const Tensor probe = Tensor::empty(t.device, {1}, DType::f32, MemTag::workspace);
          fill(t.device.stream(Lane::compute), probe, 1);
          const OpRecord& next = t.device.ops().back();
          EXPECT_EQ(next.lane, Lane::compute);
          EXPECT_NE(std::find(next.deps.begin(), next.deps.end(), gather_ref), next.deps.end());
          EXPECT_GE(next.begin, gather.end);
          // Gathering a gathered unit does nothing.
          const std::size_t ops_gathered = t.device.ops().size();
          forward.pre_forward(*unit);
          EXPECT_EQ(t.device.ops().size(), ops_gathered);
          EXPECT_EQ(ledger.live(MemTag::param_full), unit->layout.padded_numel * 4);

          forward.post_forward(*unit);
          EXPECT_EQ(unit->state, UnitState::sharded);
          EXPECT_EQ(ledger.live(MemTag::param_full), 0);
          EXPECT_FALSE(unit->full.has_data());
          for (const FlatParamEntry& e : unit->layout.entries) EXPECT_FALSE(e.param->value.has_data()) << e.param->name;
        }
        // The largest unit (fc1, 100 elements padded to W) was the most ever gathered at once.
        std::int64_t largest = 0;
        for (const FsdpUnit* unit : t.sharded.units()) largest = std::max(largest, unit->layout.padded_numel);
        EXPECT_EQ(ledger.peak(MemTag::param_full), largest * 4);
      },
      5);
}

TEST(FsdpForward, PreForwardGathersTheWholeUnitAndPostForwardFreesIt) {
  for (int world : {2, 3}) check_gather_and_reshard(world);
}

TEST(FsdpForward, ShardGradOpKeepsTheUnitGatheredAfterForward) {
  const auto baseline = baseline_values(toy, 5);
  for (int world : {2, 3}) {
    SCOPED_TRACE("W " + std::to_string(world));
    with_fsdp_ranks(
        world, with_strategy(ShardingStrategy::shard_grad_op), toy, kToyUnits,
        [&](FsdpTestRank& t) {
          UnitLifecycle& forward = t.sharded.lifecycle();
          std::int64_t gathered = 0;
          for (FsdpUnit* unit : t.sharded.units()) {
            EXPECT_FALSE(unit->reshard_after_forward) << unit->name;
            forward.pre_forward(*unit);
            forward.post_forward(*unit);
            gathered += unit->layout.padded_numel;
            EXPECT_EQ(unit->state, UnitState::unsharded) << unit->name;
            EXPECT_EQ(t.device.ledger().live(MemTag::param_full), gathered * 4) << unit->name;
            expect_views_hold(*unit, baseline, DType::f32);
          }
          // The backward's reshard frees them all.
          for (FsdpUnit* unit : t.sharded.units()) forward.reshard(*unit);
          EXPECT_EQ(t.device.ledger().live(MemTag::param_full), 0);
          EXPECT_EQ(count_ops(t.device, OpCategory::all_gather, Lane::all_gather), 3);
        },
        5);
  }
}

TEST(FsdpForward, Bf16ParamsGatherTheInitialValuesRoundedToBf16) {
  auto baseline = baseline_values(toy, 8);
  for (auto& [name, values] : baseline) values = rounded_to_bf16(values);
  for (int world : {2, 3}) {
    SCOPED_TRACE("W " + std::to_string(world));
    with_fsdp_ranks(
        world, with_strategy(ShardingStrategy::full_shard, DType::bf16), toy, kToyUnits,
        [&](FsdpTestRank& t) {
          UnitLifecycle& forward = t.sharded.lifecycle();
          const MemoryLedger& ledger = t.device.ledger();
          for (FsdpUnit* unit : t.sharded.units()) {
            SCOPED_TRACE(unit->name);
            const std::size_t ops_before = t.device.ops().size();
            forward.pre_forward(*unit);
            EXPECT_EQ(unit->full.dtype(), DType::bf16);
            EXPECT_EQ(unit->master.dtype(), DType::f32);  // the master stays f32
            EXPECT_EQ(ledger.live(MemTag::param_full), unit->layout.padded_numel * 2);
            EXPECT_EQ(ledger.live(MemTag::comm_buffer), 0);  // the bf16 copy of the shard is gone
            expect_views_hold(*unit, baseline, DType::bf16);
            // The gather moves bf16: half the bytes of the f32 master.
            int gathers = 0;
            for (std::size_t i = ops_before; i < t.device.ops().size(); ++i) {
              const OpRecord& op = t.device.ops()[i];
              if (op.category != OpCategory::all_gather) continue;
              ++gathers;
              EXPECT_EQ(op.lane, Lane::all_gather);
              EXPECT_EQ(op.bytes_moved, unit->layout.padded_numel * 2);
            }
            EXPECT_EQ(gathers, 1);
            forward.post_forward(*unit);
            EXPECT_EQ(ledger.live(MemTag::param_full), 0);
          }
        },
        8);
  }
}

TEST(FsdpForward, ReplicatedStrategiesUseTheReplicaWithoutGathering) {
  const auto baseline = baseline_values(toy, 4);
  for (ShardingStrategy strategy : {ShardingStrategy::no_shard, ShardingStrategy::zero1, ShardingStrategy::zero2}) {
    SCOPED_TRACE(std::string(strategy_name(strategy)));
    with_fsdp_ranks(
        2, with_strategy(strategy), toy, kToyUnits,
        [&](FsdpTestRank& t) {
          UnitLifecycle& forward = t.sharded.lifecycle();
          for (FsdpUnit* unit : t.sharded.units()) {
            EXPECT_FALSE(unit->reshard_after_forward);
            EXPECT_TRUE(unit->full.overlaps(unit->replica));  // f32 params: the replica is the full buffer
            forward.pre_forward(*unit);
            expect_views_hold(*unit, baseline, DType::f32);
            // Even a reshard keeps the replica.
            forward.reshard(*unit);
            EXPECT_TRUE(unit->full.has_data());
          }
          EXPECT_EQ(count_ops(t.device, OpCategory::all_gather), 0);
        },
        4);
  }
}

TEST(FsdpForward, Gpt2RootStaysGatheredAfterForwardBlocksReshard) {
  for (ShardingStrategy strategy : {ShardingStrategy::full_shard, ShardingStrategy::hybrid_shard,
                                    ShardingStrategy::shard_grad_op}) {
    FsdpOptions options = with_strategy(strategy);
    if (strategy == ShardingStrategy::hybrid_shard) options.hybrid_group = 2;
    with_fsdp_ranks(
        4, options, gpt2_tiny, {"Block"},
        [&](FsdpTestRank& t) {
          const auto units = t.sharded.units();
          ASSERT_EQ(units.size(), 3u);
          EXPECT_EQ(units[0]->name, "(root)");
          EXPECT_FALSE(units[0]->reshard_after_forward);
          for (std::size_t i = 1; i < units.size(); ++i)
            EXPECT_EQ(units[i]->reshard_after_forward, strategy != ShardingStrategy::shard_grad_op)
                << strategy_name(strategy) << " " << units[i]->name;
          // Hybrid shards over groups of 2: a unit's layout is for S = 2, not W = 4.
          EXPECT_EQ(units[1]->layout.world, strategy == ShardingStrategy::hybrid_shard ? 2 : 4);
        },
        -1);
  }
}

TEST(FsdpForward, ModelForwardThroughTheHooksGathersOneUnitAtATime) {
  // The toy model's own forward, wrapped: each unit is gathered before its module runs and freed
  // after, every gather is labelled with its unit, and the loss is the unsharded baseline's.
  constexpr std::int64_t rows = 4;
  const std::vector<float> inputs = random_values(rows * 10, 1), targets = random_values(rows * 5, 2);
  const float baseline_loss = [&] {
    auto device = make_sim_device();
    ToyModel model;
    materialise(model, *device, 6);
    RunContext ctx{*device, DType::f32};
    const Batch batch{tensor_from(*device, {rows, 10}, inputs), tensor_from(*device, {rows, 5}, targets)};
    return read(model.forward(ctx, batch))[0];
  }();
  with_fsdp_ranks(
      2, with_strategy(ShardingStrategy::full_shard), toy, kToyUnits,
      [&](FsdpTestRank& t) {
        RunContext ctx{t.device, DType::f32};
        const Batch batch{tensor_from(t.device, {rows, 10}, inputs), tensor_from(t.device, {rows, 5}, targets)};
        const float loss = read(t.model.forward(ctx, batch))[0];
        EXPECT_EQ(loss, baseline_loss);
        std::int64_t largest = 0;
        for (const FsdpUnit* unit : t.sharded.units()) {
          EXPECT_EQ(unit->state, UnitState::sharded) << unit->name;
          largest = std::max(largest, unit->layout.padded_numel);
        }
        EXPECT_EQ(t.device.ledger().live(MemTag::param_full), 0);
        EXPECT_EQ(t.device.ledger().peak(MemTag::param_full), largest * 4);
        std::vector<int> gathered_units;
        for (const OpRecord& op : t.device.ops())
          if (op.category == OpCategory::all_gather) gathered_units.push_back(op.labels.unit);
        EXPECT_EQ(gathered_units, (std::vector<int>{0, 1, 2}));
      },
      6);
}

}  // namespace
}  // namespace fsdplab
