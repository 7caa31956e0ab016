// Task 1, meta init: every rank's shard, drawn alone from the counter-based RNG, equals the same
// slice of the unsharded initialisation (materialise) laid out flat, with padding and alignment
// gaps zero — for odd W, parameters cut between ranks, ranks owning none of a small parameter, and
// shards partly or wholly padding; a FullyShardedModel's init allocates only shards, never a whole
// unit; and --save-init of a sharded run writes the unsharded initialisation.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <set>

#include "engine/nn/checkpoint.hpp"
#include "engine/nn/gpt2_model.hpp"
#include "engine/nn/toy_model.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/model_factory.hpp"
#include "fsdp_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

const MetaInitTask& meta_init = reference_meta_init();
const FlatParameterTask& flat = reference_flat_parameter();

std::unique_ptr<Model> toy() { return std::make_unique<ToyModel>(); }
std::unique_ptr<Model> gpt2_tiny() { return std::make_unique<Gpt2Model>(gpt2_preset("test-tiny")); }

// Rank r's shard of the toy model's one FlatParameter (init_shard into a buffer filled with NaN, so
// an element it leaves unwritten shows), checked against chunk r of the flat baseline.
void check_toy_shards(int world, std::int64_t align, std::uint64_t seed) {
  SCOPED_TRACE("W " + std::to_string(world) + ", align " + std::to_string(align));
  const std::vector<float> expected_flat = [&] {
    ToyModel model;
    const std::vector<Parameter*> params = model.parameters();
    return flat_values(flat.plan(params, world, align), baseline_values(toy, seed));
  }();
  auto device = make_sim_device();
  ToyModel model;  // shapes only
  const std::vector<Parameter*> params = model.parameters();
  const FlatParamLayout layout = flat.plan(params, world, align);
  for (int r = 0; r < world; ++r) {
    const Tensor shard = Tensor::empty(*device, {layout.shard_numel()}, DType::f32, MemTag::param_shard, "shard");
    shard.copy_from(std::vector<float>(static_cast<std::size_t>(layout.shard_numel()),
                                       std::numeric_limits<float>::quiet_NaN()));
    const std::int64_t live_before = device->ledger().live_total();
    meta_init.init_shard(flat.shard_slices(layout, r), shard, seed);
    EXPECT_EQ(device->ledger().live_total(), live_before) << "init_shard allocated device memory";
    EXPECT_EQ(read(shard), chunk_of(expected_flat, layout, r)) << "rank " << r;
  }
}

TEST(FsdpMetaInit, ToyModelShardsAreSlicesOfTheUnshardedInitialisation) {
  for (int world : {1, 2, 3, 4, 5, 8, 16, 64})
    for (std::int64_t align : {1, 4}) check_toy_shards(world, align, 1234);
}

TEST(FsdpMetaInit, TheCasesTheShardCheckCovers) {
  // The layouts check_toy_shards runs on really have the shapes the task is about.
  ToyModel model;
  const std::vector<Parameter*> params = model.parameters();
  // W = 3, align 1: 170 elements padded to 171, chunks of 57: fc1.weight (100) cut between ranks 0
  // and 1, ln.bias ([110, 120)) between ranks 1 and 2.
  FlatParamLayout l = flat.plan(params, 3, 1);
  EXPECT_EQ(l.padded_numel, 171);
  EXPECT_EQ(flat.shard_slices(l, 1).front().param->name, "fc1.weight");
  EXPECT_EQ(flat.shard_slices(l, 1).front().param_begin, 57);
  EXPECT_EQ(flat.shard_slices(l, 1).back().param->name, "ln.bias");
  EXPECT_EQ(flat.shard_slices(l, 1).back().count, 4);
  EXPECT_EQ(flat.shard_slices(l, 2).front().param->name, "ln.bias");
  EXPECT_EQ(flat.shard_slices(l, 2).front().param_begin, 4);
  // W = 4, align 1: chunks of 43; rank 2 holds fc1.weight's elements [86, 100).
  l = flat.plan(params, 4, 1);
  EXPECT_EQ(flat.shard_slices(l, 2).front().param_begin, 86);
  // W = 16, align 1: chunks of 11; ln.bias is [110, 120), all on rank 10; rank 15 holds the last 5
  // elements of fc2.weight and 6 of padding.
  l = flat.plan(params, 16, 1);
  for (int r = 0; r < 16; ++r) {
    bool has_ln_bias = false;
    for (const ShardSlice& s : flat.shard_slices(l, r)) has_ln_bias |= s.param->name == "ln.bias";
    EXPECT_EQ(has_ln_bias, r == 10) << "rank " << r;
  }
  const auto last = flat.shard_slices(l, 15);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].count, 5);
  // W = 64: chunks of 3 over 192 elements; ranks 57 to 63 hold padding only.
  l = flat.plan(params, 64, 1);
  EXPECT_EQ(l.padded_numel, 192);
  EXPECT_FALSE(flat.shard_slices(l, 56).empty());
  for (int r = 57; r < 64; ++r) EXPECT_TRUE(flat.shard_slices(l, r).empty()) << "rank " << r;
}

TEST(FsdpMetaInit, TheSeedAndTheElementIndexReachEveryValue) {
  // A shard drawn at another seed differs, and so does a slice drawn from index 0 instead of its own
  // first element: the equalities above cannot hold by accident.
  auto device = make_sim_device();
  ToyModel model;
  const std::vector<Parameter*> params = model.parameters();
  const FlatParamLayout layout = flat.plan(params, 2, 1);
  const Tensor a = Tensor::empty(*device, {layout.shard_numel()}, DType::f32, MemTag::param_shard);
  const Tensor b = Tensor::empty(*device, {layout.shard_numel()}, DType::f32, MemTag::param_shard);
  meta_init.init_shard(flat.shard_slices(layout, 0), a, 1);
  meta_init.init_shard(flat.shard_slices(layout, 0), b, 2);
  EXPECT_NE(read(a), read(b));
  meta_init.init_shard(flat.shard_slices(layout, 1), b, 1);
  const std::vector<float> r0 = read(a), r1 = read(b);
  EXPECT_NE(std::vector<float>(r0.begin(), r0.begin() + 10), std::vector<float>(r1.begin(), r1.begin() + 10));
}

TEST(FsdpMetaInit, WrongShardBufferIsAnError) {
  auto device = make_sim_device();
  ToyModel model;
  const std::vector<Parameter*> params = model.parameters();
  const FlatParamLayout layout = flat.plan(params, 4, 1);
  const Tensor small = Tensor::empty(*device, {layout.shard_numel() - 1}, DType::f32, MemTag::param_shard);
  EXPECT_TRUE(contains(error_of([&] { meta_init.init_shard(flat.shard_slices(layout, 0), small, 0); }),
                       "of a shard of 42 elements"));
  const Tensor half = Tensor::empty(*device, {layout.shard_numel()}, DType::bf16, MemTag::param_shard);
  EXPECT_THROW(meta_init.init_shard(flat.shard_slices(layout, 0), half, 0), Error);
}

// GPT-2 test-tiny over W ranks: init_parameters holds only shards (no param_full ever, param_shard's
// peak exactly the shards), and each rank's master is its chunk of the baseline's initialisation.
void check_gpt2_init(int world) {
  SCOPED_TRACE("W " + std::to_string(world));
  const auto baseline = baseline_values(gpt2_tiny, 7);
  with_fsdp_ranks(
      world, FsdpOptions{}, gpt2_tiny, {"Block"},
      [&](FsdpTestRank& t) {
        const auto units = t.sharded.units();
        ASSERT_EQ(units.size(), 3u);  // the root and two Blocks
        std::int64_t shard_elements = 0;
        for (const FsdpUnit* unit : units) {
          EXPECT_EQ(unit->layout.world, world);
          EXPECT_EQ(unit->master.numel(), unit->layout.shard_numel());
          EXPECT_EQ(unit->state, UnitState::sharded);
          EXPECT_FALSE(unit->full.has_data()) << unit->name;
          shard_elements += unit->layout.shard_numel();
          EXPECT_EQ(read(unit->master), chunk_of(flat_values(unit->layout, baseline), unit->layout, t.r))
              << unit->name << " rank " << t.r;
        }
        const MemoryLedger& ledger = t.device.ledger();
        EXPECT_EQ(ledger.peak(MemTag::param_full), 0);
        EXPECT_EQ(ledger.peak(MemTag::grad_full), 0);
        EXPECT_EQ(ledger.peak(MemTag::param_shard), shard_elements * 4);
        EXPECT_EQ(ledger.live(MemTag::param_shard), shard_elements * 4);
        EXPECT_EQ(ledger.peak(MemTag::grad_shard), shard_elements * 4);
        // So a rank holds 1/W of the model, up to padding: fewer than W elements per unit, and the
        // alignment gaps (under `align` elements before each parameter).
        std::int64_t model_elements = 0, most_padding = 0;
        for (Parameter* p : t.model.parameters()) model_elements += p->numel();
        for (const FsdpUnit* unit : units)
          most_padding +=
              (world - 1) + static_cast<std::int64_t>(unit->layout.entries.size()) * (unit->layout.align - 1);
        EXPECT_GE(shard_elements * world, model_elements);
        EXPECT_LE(shard_elements * world, model_elements + most_padding);
      },
      7);
}

TEST(FsdpMetaInit, Gpt2TinyInitAllocatesOnlyShards) {
  for (int world : {1, 2, 3, 4}) check_gpt2_init(world);
}

TEST(FsdpMetaInit, ReplicatedStrategiesInitialiseEveryChunk) {
  // no_shard and zero1 keep the whole parameters: every chunk of the replica is initialised, equal on
  // every rank, and master is this rank's chunk of it.
  const auto baseline = baseline_values(toy, 3);
  for (ShardingStrategy strategy : {ShardingStrategy::no_shard, ShardingStrategy::zero1}) {
    FsdpOptions options;
    options.strategy = strategy;
    with_fsdp_ranks(
        3, options, toy, {},
        [&](FsdpTestRank& t) {
          ASSERT_EQ(t.sharded.units().size(), 1u);
          const FsdpUnit& unit = *t.sharded.units()[0];
          const std::vector<float> whole = flat_values(unit.layout, baseline);
          EXPECT_EQ(read(unit.replica), whole) << strategy_name(strategy);
          EXPECT_EQ(read(unit.master), chunk_of(whole, unit.layout, t.shard_rank())) << strategy_name(strategy);
          EXPECT_TRUE(unit.master.overlaps(unit.replica));
        },
        3);
  }
}

class FsdpMetaInitFiles : public TempDirTest {};

TEST_F(FsdpMetaInitFiles, SaveInitOfAShardedRunIsTheUnshardedInitialisation) {
  // --save-init of a toy run over 3 ranks gathers the shards: the folder holds the unsharded draw.
  FsdpRun fsdp;
  fsdp.run.model = "toy";
  fsdp.run.world = 3;
  fsdp.run.batch = 6;
  fsdp.run.steps = 0;
  fsdp.run.seed = 11;
  fsdp.run.save_init = path("init").string();
  train_fsdp(fsdp, PresetCatalog::builtin(), {});
  auto device = make_sim_device();  // declared first: the model's tensors go before it
  const BuiltModel built = build_model(fsdp.run);
  materialise(*built.model, *device, 0);  // storage for the load, which replaces these values
  load_checkpoint(path("init"), *built.model, built.identity);
  const auto baseline = baseline_values(toy, 11);
  for (Parameter* p : built.model->parameters()) EXPECT_EQ(read(p->value), baseline.at(p->name)) << p->name;
}

}  // namespace
}  // namespace fsdplab
