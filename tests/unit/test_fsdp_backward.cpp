// Task 4, backward: pre_backward gathers a unit again (only if it was resharded) and points the
// gradient views into a zeroed full gradient buffer; post_backward reduces known rank-dependent
// gradients into this rank's chunk of their average over all W ranks — full_shard at odd W, hybrid
// (the average still over all ranks), no_shard and zero1 (the whole average on every rank), zero2,
// bf16 params with f32 and with bf16 reduction — on the reduce-scatter stream, and frees both full
// buffers. And the toy model's own backward through the hooks gives the baseline's gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/nn/toy_model.hpp"
#include "engine/tensor/elementwise.hpp"
#include "fsdp_testing.hpp"
#include "nn_ops_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

const std::vector<std::string> kToyUnits = {"Linear", "LayerNorm"};  // fc1, ln, fc2

std::unique_ptr<Model> toy() { return std::make_unique<ToyModel>(); }

// The gradient's base values over a unit's flat buffer: small integers, so (r + 1) x summed over the
// ranks and divided by W = 3 or by 2 twice (hybrid) is exact; or, `fractional`, values bf16 cannot
// hold exactly. Rank r's gradient is (r + 1) x.
std::vector<float> base_gradient(std::int64_t n, bool fractional) {
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    x[static_cast<std::size_t>(i)] = fractional ? 0.1f * static_cast<float>(i % 17 + 1) * (i % 2 ? -1.f : 1.f)
                                                : static_cast<float>(i % 13 - 6);
  return x;
}

std::vector<float> rank_gradient(const std::vector<float>& x, int r) {
  std::vector<float> g = x;
  for (float& v : g) v *= static_cast<float>(r + 1);
  return g;
}

// Before pre_backward, freed blocks of grad_full's size holding 7s, which a caching allocator hands
// out again (two: the gather may take one for the full parameters): pre_backward must zero what it gets.
void leave_junk_blocks(FsdpTestRank& t, const FsdpUnit& unit) {
  const Tensor a = Tensor::empty(t.device, unit.grad_full.shape(), unit.grad_full.dtype(), MemTag::workspace);
  const Tensor b = Tensor::empty(t.device, unit.grad_full.shape(), unit.grad_full.dtype(), MemTag::workspace);
  fill(t.device.stream(Lane::compute), a, 7);
  fill(t.device.stream(Lane::compute), b, 7);
}

// pre_backward, then rank r writes (r + 1) x through the host, then post_backward: grad_shard must be
// chunk `shard rank` of the average, (W + 1) / 2 x, exactly. Also checks the views, the ops and the frees.
void check_exact_reduction(int world, const FsdpOptions& options) {
  SCOPED_TRACE(describe(options, world));
  const ShardingStrategy strategy = options.strategy;
  with_fsdp_ranks(world, options, toy, kToyUnits, [&](FsdpTestRank& t) {
    UnitLifecycle& backward = t.sharded.lifecycle();
    const MemoryLedger& ledger = t.device.ledger();
    for (FsdpUnit* unit : t.sharded.units()) {
      SCOPED_TRACE(unit->name);
      const FlatParamLayout& layout = unit->layout;
      if (!unit->grad_replica.defined()) leave_junk_blocks(t, *unit);
      backward.pre_backward(*unit);
      EXPECT_EQ(unit->state, UnitState::unsharded);
      for (const FlatParamEntry& e : layout.entries) {
        EXPECT_EQ(&e.param->grad.storage(), &unit->grad_full.storage()) << e.param->name;
        EXPECT_EQ(e.param->grad.offset(), unit->grad_full.offset() + e.offset) << e.param->name;
        EXPECT_EQ(e.param->grad.shape(), e.param->shape) << e.param->name;
      }
      EXPECT_EQ(read(unit->grad_full), std::vector<float>(static_cast<std::size_t>(layout.padded_numel), 0.f));

      const std::vector<float> x = base_gradient(layout.padded_numel, false);
      t.device.synchronize();  // the host writes what the compute stream zeroed
      unit->grad_full.copy_from(rank_gradient(x, t.r));
      const std::size_t ops_before = t.device.ops().size();
      backward.post_backward(*unit);

      std::vector<float> average = x;
      for (float& v : average) v *= static_cast<float>(world + 1) / 2;
      EXPECT_EQ(read(unit->grad_shard), chunk_of(average, layout, t.shard_rank())) << "rank " << t.r;
      if (unit->grad_replica.defined()) {
        EXPECT_EQ(read(unit->grad_replica), average) << "rank " << t.r;
      }

      // The reduction ran on the reduce-scatter stream: a reduce-scatter over the shard group (and an
      // all-reduce over the replicas for hybrid), or one all-reduce of the whole for no_shard and zero1.
      const bool whole = gradients_replicated(strategy);
      EXPECT_EQ(count_ops(t.device, OpCategory::reduce_scatter, Lane::reduce_scatter, ops_before), whole ? 0 : 1);
      EXPECT_EQ(count_ops(t.device, OpCategory::reduce_scatter, ops_before), whole ? 0 : 1);
      const int all_reduces = whole || strategy == ShardingStrategy::hybrid_shard ? 1 : 0;
      EXPECT_EQ(count_ops(t.device, OpCategory::all_reduce, Lane::reduce_scatter, ops_before), all_reduces);
      EXPECT_EQ(count_ops(t.device, OpCategory::all_reduce, ops_before), all_reduces);

      // Both full buffers go, unless they are the replicas the strategy keeps.
      EXPECT_EQ(unit->state, UnitState::sharded);
      EXPECT_EQ(unit->grad_full.has_data(), unit->grad_replica.defined());
      EXPECT_EQ(unit->full.has_data(), parameters_replicated(strategy));
      for (const FlatParamEntry& e : layout.entries)
        EXPECT_EQ(e.param->grad.has_data(), unit->grad_replica.defined()) << e.param->name;
    }
    if (strategy == ShardingStrategy::full_shard || strategy == ShardingStrategy::hybrid_shard) {
      EXPECT_EQ(ledger.live(MemTag::grad_full), 0);
      EXPECT_EQ(ledger.live(MemTag::param_full), 0);
    }
    if (strategy == ShardingStrategy::zero1) {  // the whole averaged gradient stays, tagged as whole
      std::int64_t whole = 0;
      for (const FsdpUnit* unit : t.sharded.units()) whole += unit->layout.padded_numel;
      EXPECT_EQ(ledger.live(MemTag::grad_full), whole * 4);
    }
    EXPECT_EQ(ledger.live(MemTag::comm_buffer), 0);
  });
}

TEST(FsdpBackward, FullShardOddWorldReducesTheAverageIntoEachShard) {
  check_exact_reduction(3, make_options(ShardingStrategy::full_shard));
}

TEST(FsdpBackward, HybridAveragesOverAllRanksNotJustTheShardGroup) {
  check_exact_reduction(4, make_options(ShardingStrategy::hybrid_shard, 2));
}

TEST(FsdpBackward, NoShardAndZero1KeepTheWholeAverage) {
  check_exact_reduction(3, make_options(ShardingStrategy::no_shard));
  check_exact_reduction(3, make_options(ShardingStrategy::zero1));
}

TEST(FsdpBackward, Zero2AndShardGradOpReduceScatter) {
  check_exact_reduction(3, make_options(ShardingStrategy::zero2));
  check_exact_reduction(2, make_options(ShardingStrategy::shard_grad_op));
}

// bf16 params: the gradient is computed (here: written) in bf16, reduced in reduce_dtype, kept f32.
void check_bf16_reduction(DType reduce_dtype) {
  constexpr int world = 3;
  const FsdpOptions options = make_options(ShardingStrategy::full_shard, 0, DType::bf16, reduce_dtype);
  SCOPED_TRACE(describe(options, world));
  with_fsdp_ranks(world, options, toy, kToyUnits, [&](FsdpTestRank& t) {
    UnitLifecycle& backward = t.sharded.lifecycle();
    int not_bf16 = 0;  // averaged values bf16 cannot hold
    for (FsdpUnit* unit : t.sharded.units()) {
      SCOPED_TRACE(unit->name);
      const FlatParamLayout& layout = unit->layout;
      backward.pre_backward(*unit);
      EXPECT_EQ(unit->grad_full.dtype(), DType::bf16);
      EXPECT_EQ(unit->grad_full.nbytes(), layout.padded_numel * 2);
      const std::vector<float> x = base_gradient(layout.padded_numel, true);
      t.device.synchronize();
      unit->grad_full.copy_from(rank_gradient(x, t.r));  // rounded to bf16 on the way in
      backward.post_backward(*unit);

      // The exact mean of what the ranks held: their bf16 gradients.
      std::vector<double> mean(x.size(), 0.0);
      for (int q = 0; q < world; ++q) {
        const std::vector<float> held = rounded_to_bf16(rank_gradient(x, q));
        for (std::size_t i = 0; i < x.size(); ++i) mean[i] += held[i] / double{world};
      }
      const std::int64_t n = layout.shard_numel();
      const std::vector<double> expected(mean.begin() + t.shard_rank() * n, mean.begin() + (t.shard_rank() + 1) * n);
      const std::vector<float> got = read(unit->grad_shard);
      EXPECT_EQ(unit->grad_shard.dtype(), DType::f32);
      if (reduce_dtype == DType::f32) {
        EXPECT_TRUE(all_close(got, expected, 0, 1e-6));
      } else {
        // One bf16 rounding of the f32 mean: within half a bf16 ulp, and a bf16 value.
        EXPECT_TRUE(all_close(got, expected, 0, kBf16Rtol));
        EXPECT_EQ(got, rounded_to_bf16(got));
      }
      for (float v : got) not_bf16 += round_to_bf16(v) != v;
      EXPECT_EQ(t.device.ledger().live(MemTag::grad_full), 0);
      EXPECT_EQ(t.device.ledger().live(MemTag::param_full), 0);
      EXPECT_EQ(t.device.ledger().live(MemTag::comm_buffer), 0);  // the f32 or bf16 staging buffers too
    }
    if (reduce_dtype == DType::f32) {
      EXPECT_GT(not_bf16, 0) << "an f32 reduction must keep f32 precision";
    }
  });
}

TEST(FsdpBackward, Bf16ParamsWithF32Reduce) { check_bf16_reduction(DType::f32); }

TEST(FsdpBackward, Bf16ParamsWithBf16Reduce) { check_bf16_reduction(DType::bf16); }

TEST(FsdpBackward, PreBackwardGathersAgainOnlyWhenTheForwardResharded) {
  for (ShardingStrategy strategy : {ShardingStrategy::full_shard, ShardingStrategy::shard_grad_op}) {
    with_fsdp_ranks(2, make_options(strategy), toy, kToyUnits, [&](FsdpTestRank& t) {
      UnitLifecycle& forward = t.sharded.lifecycle();
      UnitLifecycle& backward = t.sharded.lifecycle();
      for (FsdpUnit* unit : t.sharded.units()) {
        forward.pre_forward(*unit);
        forward.post_forward(*unit);
        const std::size_t ops_before = t.device.ops().size();
        backward.pre_backward(*unit);
        EXPECT_EQ(count_ops(t.device, OpCategory::all_gather, Lane::all_gather, ops_before),
                  strategy == ShardingStrategy::full_shard ? 1 : 0)
            << strategy_name(strategy) << " " << unit->name;
        EXPECT_EQ(unit->state, UnitState::unsharded);
        EXPECT_TRUE(unit->layout.entries.front().param->value.has_data());
        backward.post_backward(*unit);
      }
      EXPECT_EQ(t.device.ledger().live(MemTag::param_full), 0);
      EXPECT_EQ(t.device.ledger().live(MemTag::grad_full), 0);
    });
  }
}

TEST(FsdpBackward, ModelBackwardThroughTheHooksGivesTheBaselineGradients) {
  // Each of 2 ranks runs the toy model on its half of a batch; the averaged gradient shards are the
  // chunks of the baseline's gradient over the whole batch.
  constexpr std::int64_t rows = 4;
  const std::vector<float> inputs = random_values(rows * 10, 3), targets = random_values(rows * 5, 4);
  const auto baseline = [&] {
    auto device = make_sim_device();
    ToyModel model;
    materialise(model, *device, 9);
    RunContext ctx{*device, DType::f32};
    const Batch batch{tensor_from(*device, {rows, 10}, inputs), tensor_from(*device, {rows, 5}, targets)};
    model.forward(ctx, batch);
    model.backward(ctx);
    std::map<std::string, std::vector<float>> grads;
    for (Parameter* p : model.parameters()) grads[p->name] = read(p->grad);
    return grads;
  }();
  with_fsdp_ranks(
      2, make_options(ShardingStrategy::full_shard), toy, kToyUnits,
      [&](FsdpTestRank& t) {
        constexpr std::int64_t mine = rows / 2;
        RunContext ctx{t.device, DType::f32};
        const Batch batch{
            tensor_from(t.device, {mine, 10}, std::span<const float>(inputs).subspan(t.r * mine * 10, mine * 10)),
            tensor_from(t.device, {mine, 5}, std::span<const float>(targets).subspan(t.r * mine * 5, mine * 5))};
        t.model.forward(ctx, batch);
        t.model.backward(ctx);
        for (const FsdpUnit* unit : t.sharded.units()) {
          EXPECT_EQ(unit->state, UnitState::sharded) << unit->name;
          const std::vector<float> whole = flat_values(unit->layout, baseline);
          EXPECT_TRUE(all_close(read(unit->grad_shard), chunk_of(whole, unit->layout, t.r), 1e-6, 1e-5))
              << unit->name << " rank " << t.r;
        }
        EXPECT_EQ(t.device.ledger().live(MemTag::param_full), 0);
        EXPECT_EQ(t.device.ledger().live(MemTag::grad_full), 0);
        // Every unit reduced once, on the reduce-scatter stream, labelled with its unit: in backward order.
        std::vector<int> reduced_units;
        for (const OpRecord& op : t.device.ops()) {
          if (op.category != OpCategory::reduce_scatter) continue;
          EXPECT_EQ(op.lane, Lane::reduce_scatter);
          reduced_units.push_back(op.labels.unit);
        }
        EXPECT_EQ(reduced_units, (std::vector<int>{2, 1, 0}));
      },
      9);
}

}  // namespace
}  // namespace fsdplab
