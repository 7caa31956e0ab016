// fsdp_testing.hpp — what the Fsdp* tests share beyond test_support.hpp: W ranks set up as
// train_fsdp sets them up (a sim device, the world, the shard and replica groups, an FsdpRank and a
// FullyShardedModel over a fresh model per rank), and the unsharded initialisation laid out flat.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/local_comm.hpp"
#include "engine/fsdp/fully_sharded_model.hpp"
#include "engine/train/world.hpp"
#include "test_support.hpp"

namespace fsdplab::testing {

// What one rank's test body gets.
struct FsdpTestRank {
  int r;                      // the world rank
  SimDevice& device;
  LocalComm& world;
  FsdpRank& rank;
  Model& model;
  FullyShardedModel& sharded;
  int shard_rank() const { return rank.shard_group.rank(); }
};

// FSDP options with the fields these tests vary; everything else at its default, except the overlap
// mode: SYNC, where tasks 3 and 4 free their buffers before they return (ASYNC parks them until their
// last user is done; test_fsdp_overlap.cpp tests that).
inline FsdpOptions make_options(ShardingStrategy strategy, int hybrid_group = 0, DType param_dtype = DType::f32,
                                DType reduce_dtype = DType::f32) {
  FsdpOptions options = sync_schedule(FsdpOptions{});
  options.strategy = strategy;
  options.hybrid_group = hybrid_group;
  options.param_dtype = param_dtype;
  options.reduce_dtype = reduce_dtype;
  return options;
}

using ModelFactory = std::function<std::unique_ptr<Model>()>;

// Runs body on `world` ranks (threads), each with its own sim device (op log kept, races throwing)
// and a FullyShardedModel over its own `make_model()` wrapped by `unit_kinds`, the groups split as
// train_fsdp splits them: shard group color rank / S, replica group color rank % S. The parameters
// are initialised under `seed` (task 1) before body runs, unless `seed` is negative.
inline void with_fsdp_ranks(int world, const FsdpOptions& options, const ModelFactory& make_model,
                            const std::vector<std::string>& unit_kinds,
                            const std::function<void(FsdpTestRank&)>& body, std::int64_t seed = 0) {
  validate_fsdp_options(options, world);
  const FsdpTasks tasks = reference_tasks();
  const int shard_size = shard_group_size(options, world);
  run_world(world, [&](int r, LocalWorld& local) {
    // Declared first: tensors must go before the device that holds their memory.
    auto device = make_sim_device(r);
    LocalComm comm(local, r, *device);
    std::unique_ptr<Communicator> shard_owned, replica_owned;
    Communicator* shard = &comm;
    Communicator* replica = &comm;
    if (shard_size != world) {
      shard_owned = comm.split(r / shard_size);
      shard = shard_owned.get();
    }
    if (shard_size != 1) {
      replica_owned = comm.split(r % shard_size);
      replica = replica_owned.get();
    }
    FsdpRank rank{*device, comm, *shard, *replica, options};
    std::unique_ptr<Model> model = make_model();
    FullyShardedModel sharded(*model, rank, tasks, unit_kinds);
    if (seed >= 0) sharded.init_parameters(static_cast<std::uint64_t>(seed));
    FsdpTestRank env{r, *device, comm, rank, *model, sharded};
    body(env);
    device->synchronize();  // nothing may still be in flight when the buffers go
  });
}

// Every parameter's unsharded initial values under `seed`, by name, from materialise of a fresh
// model on a device of its own: what the single-rank baseline starts from.
inline std::map<std::string, std::vector<float>> baseline_values(const ModelFactory& make_model, std::uint64_t seed) {
  auto device = make_sim_device();
  std::unique_ptr<Model> model = make_model();
  materialise(*model, *device, seed);
  std::map<std::string, std::vector<float>> out;
  for (Parameter* p : model->parameters()) out[p->name] = read(p->value);
  return out;
}

// A unit's values laid out flat as `layout` lays them out: each parameter's values at its offset,
// alignment gaps and padding zero. `of(name)` gives a parameter's values.
inline std::vector<float> flat_values(const FlatParamLayout& layout,
                                      const std::function<std::vector<float>(const Parameter&)>& of) {
  std::vector<float> flat(static_cast<std::size_t>(layout.padded_numel), 0.f);
  for (const FlatParamEntry& e : layout.entries) {
    const std::vector<float> v = of(*e.param);
    EXPECT_EQ(static_cast<std::int64_t>(v.size()), e.numel) << e.param->name;
    std::copy(v.begin(), v.end(), flat.begin() + e.offset);
  }
  return flat;
}

inline std::vector<float> flat_values(const FlatParamLayout& layout,
                                      const std::map<std::string, std::vector<float>>& by_name) {
  return flat_values(layout, [&](const Parameter& p) { return by_name.at(p.name); });
}

// Elements [chunk * n, (chunk + 1) * n) of `flat`, n = layout.shard_numel().
inline std::vector<float> chunk_of(const std::vector<float>& flat, const FlatParamLayout& layout, int chunk) {
  const std::int64_t n = layout.shard_numel();
  return {flat.begin() + chunk * n, flat.begin() + (chunk + 1) * n};
}

// The number of ops in `device`'s log of `category` launched on `lane`, from op index `from` on.
inline int count_ops(const Device& device, OpCategory category, Lane lane, std::size_t from = 0) {
  int n = 0;
  const auto& ops = device.ops();
  for (std::size_t i = from; i < ops.size(); ++i)
    if (ops[i].category == category && ops[i].lane == lane) ++n;
  return n;
}

// The same, on any lane.
inline int count_ops(const Device& device, OpCategory category, std::size_t from = 0) {
  int n = 0;
  const auto& ops = device.ops();
  for (std::size_t i = from; i < ops.size(); ++i)
    if (ops[i].category == category) ++n;
  return n;
}

}  // namespace fsdplab::testing
