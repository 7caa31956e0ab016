// Task 2, FlatParameter: the flat layout (alignment, padding to W), which slices each rank's shard
// holds (cut parameters, ranks owning none of a small one), and parameters as views of the buffer.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/nn/toy_model.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::make_sim_device;
using testing::materialise;
using testing::read;

// The tests check the reference implementation of the task.
const FlatParameterTask& task = reference_flat_parameter();
FlatParamLayout plan_flat_parameter(std::span<Parameter* const> params, int world, std::int64_t align) {
  return task.plan(params, world, align);
}

std::vector<Parameter> make_params(const std::vector<std::int64_t>& sizes) {
  std::vector<Parameter> params;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    params.push_back({"p" + std::to_string(i), {sizes[i]}, ParamInit::normal(0, 1), {}, {}});
  return params;
}

std::vector<Parameter*> pointers(std::vector<Parameter>& params) {
  std::vector<Parameter*> out;
  for (Parameter& p : params) out.push_back(&p);
  return out;
}

TEST(FlatParameter, ToyModelOverFourRanksCutsParametersBetweenShards) {
  ToyModel toy;  // fc1.weight 100, ln.weight 10, ln.bias 10, fc2.weight 50
  const std::vector<Parameter*> params = toy.parameters();
  const FlatParamLayout layout = plan_flat_parameter(params, 4, 1);
  EXPECT_EQ(layout.used_numel, 170);
  EXPECT_EQ(layout.padded_numel, 172);  // padded to a multiple of W
  EXPECT_EQ(layout.shard_numel(), 43);

  const auto r2 = task.shard_slices(layout, 2);  // flat [86, 129)
  ASSERT_EQ(r2.size(), 4u);
  EXPECT_EQ(r2[0].param->name, "fc1.weight");
  EXPECT_EQ(r2[0].param_begin, 86);  // fc1.weight is cut between ranks 1 and 2
  EXPECT_EQ(r2[0].count, 14);
  EXPECT_EQ(r2[1].param->name, "ln.weight");
  EXPECT_EQ(r2[1].shard_offset, 14);
  EXPECT_EQ(r2[3].param->name, "fc2.weight");
  EXPECT_EQ(r2[3].count, 9);
  // The small LayerNorm parameters live on rank 2 alone: ranks 0, 1 and 3 own none of them.
  for (int r : {0, 1, 3})
    for (const ShardSlice& s : task.shard_slices(layout, r))
      EXPECT_EQ(s.param->name.rfind("ln.", 0), std::string::npos);
  const auto r3 = task.shard_slices(layout, 3);  // fc2.weight's tail, then 2 elements of padding
  ASSERT_EQ(r3.size(), 1u);
  EXPECT_EQ(r3[0].param_begin, 9);
  EXPECT_EQ(r3[0].count, 41);
}

TEST(FlatParameter, ParametersStartAligned) {
  std::vector<Parameter> params = make_params({3, 5, 1});
  const FlatParamLayout layout = plan_flat_parameter(pointers(params), 3, 4);
  EXPECT_EQ(layout.entries[0].offset, 0);
  EXPECT_EQ(layout.entries[1].offset, 4);
  EXPECT_EQ(layout.entries[2].offset, 12);
  EXPECT_EQ(layout.used_numel, 13);
  EXPECT_EQ(layout.padded_numel, 15);
}

TEST(FlatParameter, EveryElementIsInExactlyOneShard) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::int64_t> sizes(1 + rng() % 6);
    for (auto& n : sizes) n = 1 + rng() % 40;
    std::vector<Parameter> params = make_params(sizes);
    const int world = 1 + static_cast<int>(rng() % 8);
    const std::int64_t align = std::int64_t{1} << (rng() % 4);
    const FlatParamLayout layout = plan_flat_parameter(pointers(params), world, align);
    ASSERT_EQ(layout.padded_numel % world, 0);
    std::map<const Parameter*, std::vector<int>> hits;
    for (const Parameter& p : params) hits[&p].assign(static_cast<std::size_t>(p.numel()), 0);
    for (int r = 0; r < world; ++r) {
      std::int64_t last_end = 0;
      for (const ShardSlice& s : task.shard_slices(layout, r)) {
        EXPECT_GE(s.shard_offset, last_end);  // in flat order, within the shard
        last_end = s.shard_offset + s.count;
        EXPECT_LE(last_end, layout.shard_numel());
        for (std::int64_t i = 0; i < s.count; ++i) ++hits[s.param][static_cast<std::size_t>(s.param_begin + i)];
      }
    }
    for (const auto& [param, counts] : hits)
      for (int c : counts) ASSERT_EQ(c, 1) << "trial " << trial << ", W " << world << ", align " << align;
  }
}

TEST(FlatParameter, ParametersAreViewsOfTheFlatBuffer) {
  auto dev = make_sim_device();
  ToyModel toy;
  const std::vector<Parameter*> params = toy.parameters();
  const FlatParamLayout layout = plan_flat_parameter(params, 3, 4);
  Tensor flat = Tensor::empty(*dev, {layout.padded_numel}, DType::f32, MemTag::param_full, "flat");
  Tensor grad = Tensor::empty(*dev, {layout.padded_numel}, DType::f32, MemTag::grad_full, "flat.grad");
  task.point_views(layout, flat, &Parameter::value);
  task.point_views(layout, grad, &Parameter::grad);
  EXPECT_EQ(dev->ledger().live(MemTag::param_full), layout.padded_numel * 4);  // nothing copied
  std::vector<float> zeros(static_cast<std::size_t>(layout.padded_numel), 0.f);
  flat.copy_from(zeros);
  Parameter& ln = toy.parameter("ln.weight");
  EXPECT_EQ(ln.value.shape(), (Shape{10}));
  EXPECT_EQ(&ln.value.storage(), &flat.storage());
  std::vector<float> ln_values(10, 0.f);
  ln_values[3] = 5.f;
  ln.value.copy_from(ln_values);  // a write through the view is a write to the flat buffer
  EXPECT_EQ(read(flat)[static_cast<std::size_t>(layout.entries[1].offset + 3)], 5.f);
  EXPECT_EQ(&toy.parameter("fc2.weight").grad.storage(), &grad.storage());
  // The full buffer can go (reshard) and come back with the views intact.
  flat.storage().free();
  EXPECT_FALSE(ln.value.has_data());
  flat.storage().allocate();
  EXPECT_TRUE(ln.value.has_data());
}

TEST(FlatParameter, ShardsFromTheCounterRngConcatenateToTheFullInitialisation) {
  // What task 1 (meta init) relies on: each rank fills only its slices, and the shards put together
  // equal the unsharded initialisation laid out flat.
  auto dev = make_sim_device();
  ToyModel baseline;
  materialise(baseline, *dev, 99);
  ToyModel sharded;
  const std::vector<Parameter*> params = sharded.parameters();
  const FlatParamLayout layout = plan_flat_parameter(params, 3, 1);
  std::vector<float> flat(static_cast<std::size_t>(layout.padded_numel), 0.f);
  for (int r = 0; r < 3; ++r) {
    std::vector<float> shard(static_cast<std::size_t>(layout.shard_numel()), 0.f);
    for (const ShardSlice& s : task.shard_slices(layout, r)) {
      s.param->init.fill(std::span<float>(shard).subspan(static_cast<std::size_t>(s.shard_offset),
                                                          static_cast<std::size_t>(s.count)),
                         99, s.param->name, static_cast<std::uint64_t>(s.param_begin));
    }
    std::copy(shard.begin(), shard.end(), flat.begin() + r * layout.shard_numel());
  }
  for (const FlatParamEntry& e : layout.entries) {
    const std::vector<float> whole = read(baseline.parameter(e.param->name).value);
    EXPECT_EQ(std::vector<float>(flat.begin() + e.offset, flat.begin() + e.offset + e.numel), whole) << e.param->name;
  }
}

TEST(FlatParameter, BadUnitsAreClearErrors) {
  std::vector<Parameter*> none;
  EXPECT_NE(testing::error_of([&] { plan_flat_parameter(none, 2, 1); }).find("no parameters"), std::string::npos);
  std::vector<Parameter> params = make_params({4});
  std::vector<Parameter*> twice = {&params[0], &params[0]};
  EXPECT_NE(testing::error_of([&] { plan_flat_parameter(twice, 2, 1); }).find("given twice"), std::string::npos);
  EXPECT_THROW(plan_flat_parameter(pointers(params), 0, 1), Error);
  EXPECT_THROW(plan_flat_parameter(pointers(params), 2, 0), Error);
  const FlatParamLayout layout = plan_flat_parameter(pointers(params), 2, 1);
  EXPECT_THROW(task.shard_slices(layout, 2), Error);
}

}  // namespace
}  // namespace fsdplab
