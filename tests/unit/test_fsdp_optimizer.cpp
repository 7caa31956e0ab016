// Task 5, the sharded optimizer: its state lives beside each rank's shards (AdamW's m and v are
// 1/W of the W = 1 state, up to padding; whole for no_shard), an SGD step on the shards gives the
// parameters an SGD step on the whole gives (exactly, read back gathered, and gathered again by the
// next forward), AdamW on shards equals AdamW on the unsharded baseline, and after a zero1 / zero2
// step (and no_shard's) every rank's replica holds the whole updated parameters, equal on every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>

#include "engine/nn/gpt2_model.hpp"
#include "engine/nn/toy_model.hpp"
#include "fsdp_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

const std::vector<std::string> kToyUnits = {"Linear", "LayerNorm"};  // fc1, ln, fc2

std::unique_ptr<Model> toy() { return std::make_unique<ToyModel>(); }
std::unique_ptr<Model> gpt2_tiny() { return std::make_unique<Gpt2Model>(gpt2_preset("test-tiny")); }

// The test gradient of element k of parameter `name`: multiples of 1/2 in [-2, 2], so lr 0.25 times
// it is exact and p - lr g rounds once whatever the order of operations.
float grad_value(const std::string& name, std::int64_t k) {
  return static_cast<float>((k * 7 + static_cast<std::int64_t>(name.size())) % 9 - 4) * 0.5f;
}

std::vector<float> param_grad(const Parameter& p) {
  std::vector<float> g(static_cast<std::size_t>(p.numel()));
  for (std::int64_t k = 0; k < p.numel(); ++k) g[static_cast<std::size_t>(k)] = grad_value(p.name, k);
  return g;
}

// Writes this rank's chunk of the test gradient (zero on padding) into every unit's grad_shard, as
// post_backward would leave it.
void set_grad_shards(FsdpTestRank& t) {
  const FlatParameterTask& flat = *t.sharded.tasks().flat_parameter;
  t.device.synchronize();
  for (FsdpUnit* unit : t.sharded.units()) {
    std::vector<float> shard(static_cast<std::size_t>(unit->layout.shard_numel()), 0.f);
    for (const ShardSlice& s : flat.shard_slices(unit->layout, t.shard_rank()))
      for (std::int64_t j = 0; j < s.count; ++j)
        shard[static_cast<std::size_t>(s.shard_offset + j)] = grad_value(s.param->name, s.param_begin + j);
    unit->grad_shard.copy_from(shard);
  }
}

// rank 0's live optim_state bytes after making the optimizer `spec` names, each rank checking that
// its own are `bytes_per_element` × its shard elements.
std::int64_t optim_state_bytes(int world, const FsdpOptions& options, const OptimizerSpec& spec,
                               std::int64_t bytes_per_element) {
  std::int64_t rank0 = -1;
  with_fsdp_ranks(
      world, options, gpt2_tiny, {"Block"},
      [&](FsdpTestRank& t) {
        std::int64_t shard_elements = 0;
        for (const FsdpUnit* unit : t.sharded.units()) shard_elements += unit->layout.shard_numel();
        EXPECT_EQ(t.device.ledger().live(MemTag::optim_state), 0);
        const auto optimizer = t.sharded.make_optimizer(spec);
        EXPECT_EQ(t.device.ledger().live(MemTag::optim_state), bytes_per_element * shard_elements)
            << describe(options, world) << " rank " << t.r;
        if (t.r == 0) rank0 = t.device.ledger().live(MemTag::optim_state);
      },
      -1);
  return rank0;
}

TEST(FsdpOptimizer, AdamWStateIsShardedOverTheRanks) {
  const OptimizerSpec adamw{"adamw", 1e-3, 0};
  // Each unit's elements, alignment gaps included (what W = 1 holds whole).
  std::vector<std::int64_t> used;
  {
    Gpt2Model model(gpt2_preset("test-tiny"));
    const std::vector<std::string> kinds = {"Block"};
    for (const UnitPlan& plan : reference_integration().plan_units(model, kinds))
      used.push_back(reference_flat_parameter().plan(plan.params, 1, FsdpOptions{}.align).used_numel);
  }
  ASSERT_EQ(used.size(), 3u);
  const auto sharded_bytes = [&](int world) {  // m and v, f32, over ceil(used / W) elements per unit
    std::int64_t elements = 0;
    for (std::int64_t u : used) elements += (u + world - 1) / world;
    return 2 * 4 * elements;
  };
  const std::int64_t whole = optim_state_bytes(1, make_options(ShardingStrategy::full_shard), adamw, 8);
  EXPECT_EQ(whole, sharded_bytes(1));
  for (int world : {2, 4}) {
    const std::int64_t bytes = optim_state_bytes(world, make_options(ShardingStrategy::full_shard), adamw, 8);
    EXPECT_EQ(bytes, sharded_bytes(world)) << "W " << world;
    // 1/W of the whole, up to fewer than W elements of padding per unit.
    EXPECT_GE(bytes * world, whole);
    EXPECT_LT(bytes * world, whole + 8 * world * static_cast<std::int64_t>(used.size()));
  }
  // no_shard keeps it whole; the ZeRO forms shard it; hybrid shards it over its group of S.
  EXPECT_EQ(optim_state_bytes(2, make_options(ShardingStrategy::no_shard), adamw, 8), whole);
  EXPECT_EQ(optim_state_bytes(2, make_options(ShardingStrategy::zero1), adamw, 8), sharded_bytes(2));
  EXPECT_EQ(optim_state_bytes(2, make_options(ShardingStrategy::zero2), adamw, 8), sharded_bytes(2));
  EXPECT_EQ(optim_state_bytes(4, make_options(ShardingStrategy::hybrid_shard, 2), adamw, 8), sharded_bytes(2));
  // SGD with momentum: one buffer; without: none.
  EXPECT_EQ(optim_state_bytes(2, make_options(ShardingStrategy::full_shard), {"sgd", 0.1, 0.9}, 4),
            sharded_bytes(2) / 2);
  EXPECT_EQ(optim_state_bytes(2, make_options(ShardingStrategy::full_shard), {"sgd", 0.1, 0}, 0), 0);
}

// The baseline's values after one SGD step, lr 0.25, on the test gradient: p - 0.25 g.
std::map<std::string, std::vector<float>> sgd_expected(const ModelFactory& make_model, std::uint64_t seed) {
  auto expected = baseline_values(make_model, seed);
  const std::unique_ptr<Model> shapes = make_model();
  for (Parameter* p : shapes->parameters()) {
    const std::vector<float> g = param_grad(*p);
    std::vector<float>& v = expected.at(p->name);
    for (std::size_t k = 0; k < v.size(); ++k) v[k] -= 0.25f * g[k];
  }
  return expected;
}

void check_sgd_on_shards(int world, const FsdpOptions& options) {
  SCOPED_TRACE(describe(options, world));
  const auto expected = sgd_expected(gpt2_tiny, 21);
  with_fsdp_ranks(
      world, options, gpt2_tiny, {"Block"},
      [&](FsdpTestRank& t) {
        const auto optimizer = t.sharded.make_optimizer({"sgd", 0.25, 0});
        set_grad_shards(t);
        t.sharded.optimizer_step(*optimizer);
        EXPECT_EQ(optimizer->steps(), 1);
        // Read back whole, as a --save-final gathers them.
        t.sharded.with_full_parameters([&] {
          for (Parameter* p : t.model.parameters()) EXPECT_EQ(read(p->value), expected.at(p->name)) << p->name;
        });
        // The next forward gathers the updated parameters.
        for (FsdpUnit* unit : t.sharded.units()) {
          t.sharded.lifecycle().pre_forward(*unit);
          for (const FlatParamEntry& e : unit->layout.entries)
            EXPECT_EQ(read(e.param->value), expected.at(e.param->name)) << e.param->name;
          t.sharded.lifecycle().reshard(*unit);
        }
      },
      21);
}

TEST(FsdpOptimizer, SgdOnShardsIsSgdOnTheWhole) {
  check_sgd_on_shards(1, make_options(ShardingStrategy::full_shard));
  check_sgd_on_shards(3, make_options(ShardingStrategy::full_shard));
  check_sgd_on_shards(4, make_options(ShardingStrategy::hybrid_shard, 2));
}

TEST(FsdpOptimizer, AdamWOnShardsIsAdamWOnTheWhole) {
  // Two steps of AdamW on the unsharded baseline (one optimizer target per parameter), and on the
  // shards of 3 ranks: the same elementwise update, so the same values.
  constexpr std::uint64_t seed = 13;
  const OptimizerSpec spec{"adamw", 1e-2, 0};
  const auto expected = [&] {
    auto device = make_sim_device();
    ToyModel model;
    materialise(model, *device, seed);
    std::vector<OptimTarget> targets;
    for (Parameter* p : model.parameters()) {
      p->grad.copy_from(param_grad(*p));
      targets.push_back({p->name, p->value, p->grad});
    }
    const auto optimizer = make_optimizer(spec, std::move(targets));
    optimizer->step(device->stream(Lane::compute));
    optimizer->step(device->stream(Lane::compute));
    std::map<std::string, std::vector<float>> values;
    for (Parameter* p : model.parameters()) values[p->name] = read(p->value);
    return values;
  }();
  const auto initial = baseline_values(toy, seed);
  with_fsdp_ranks(
      3, make_options(ShardingStrategy::full_shard), toy, kToyUnits,
      [&](FsdpTestRank& t) {
        const auto optimizer = t.sharded.make_optimizer(spec);
        set_grad_shards(t);
        t.sharded.optimizer_step(*optimizer);
        t.sharded.optimizer_step(*optimizer);
        t.sharded.with_full_parameters([&] {
          for (Parameter* p : t.model.parameters()) {
            const std::vector<float> got = read(p->value);
            EXPECT_EQ(got, expected.at(p->name)) << p->name;
            EXPECT_NE(got, initial.at(p->name)) << p->name;
          }
        });
        // Padding stays zero: its gradient is zero, and so is its weight decay.
        for (const FsdpUnit* unit : t.sharded.units()) {
          const std::vector<float> master = read(unit->master);
          const std::int64_t begin = t.shard_rank() * unit->layout.shard_numel();
          for (std::int64_t i = std::max(begin, unit->layout.used_numel); i < begin + unit->layout.shard_numel(); ++i)
            EXPECT_EQ(master[static_cast<std::size_t>(i - begin)], 0.f) << unit->name << " element " << i;
        }
      },
      seed);
}

// After one SGD step every rank's replica of every unit is the whole of p - 0.25 g, laid out flat:
// each checks the closed form, and the replicas are also compared between ranks.
void check_replicas_after_step(int world, ShardingStrategy strategy) {
  SCOPED_TRACE(std::string(strategy_name(strategy)) + " W " + std::to_string(world));
  const auto expected = sgd_expected(toy, 17);
  std::mutex mutex;
  std::vector<std::vector<float>> replicas(static_cast<std::size_t>(world));  // every unit's, concatenated
  with_fsdp_ranks(
      world, make_options(strategy), toy, kToyUnits,
      [&](FsdpTestRank& t) {
        const auto optimizer = t.sharded.make_optimizer({"sgd", 0.25, 0});
        set_grad_shards(t);
        const std::size_t ops_before = t.device.ops().size();
        t.sharded.optimizer_step(*optimizer);
        // The ZeRO forms gather the updated chunks, one all-gather per unit; no_shard has nothing to gather.
        const int gathers = strategy == ShardingStrategy::no_shard ? 0 : 3;
        EXPECT_EQ(count_ops(t.device, OpCategory::all_gather, Lane::all_gather, ops_before), gathers);
        std::vector<float> mine;
        for (const FsdpUnit* unit : t.sharded.units()) {
          const std::vector<float> replica = read(unit->replica);
          EXPECT_EQ(replica, flat_values(unit->layout, expected)) << unit->name << " rank " << t.r;
          mine.insert(mine.end(), replica.begin(), replica.end());
        }
        std::lock_guard lock(mutex);
        replicas[static_cast<std::size_t>(t.r)] = std::move(mine);
      },
      17);
  for (int r = 1; r < world; ++r) EXPECT_EQ(replicas[static_cast<std::size_t>(r)], replicas[0]) << "rank " << r;
}

TEST(FsdpOptimizer, ZeroReplicasAreWholeAndEqualAfterTheStep) {
  for (int world : {2, 3}) {
    check_replicas_after_step(world, ShardingStrategy::zero1);
    check_replicas_after_step(world, ShardingStrategy::zero2);
    check_replicas_after_step(world, ShardingStrategy::no_shard);
  }
}

}  // namespace
}  // namespace fsdplab
