// CPU offload (--offload): the f32 shards and the optimizer state live in pinned host memory, each
// gather starts with a host-to-device copy of the shard and each reduction ends with a copy back, both
// on the memcpy stream, and the optimizer steps on the CPU (host-lane ops on the host's clock).
// The numerics are the same ops on the same values, so a run offloaded is bit-identical to one that is
// not; the device ledger holds no shard or optimizer state; the host ledger holds them; and the op log
// shows the copies on the memcpy lane and the optimizer on the host lane, race-free in every mode.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "engine/fsdp/memory_model.hpp"
#include "engine/train/model_factory.hpp"
#include "fsdp_runs.hpp"

namespace fsdplab {
namespace {

struct Case {
  int world;
  ShardingStrategy strategy;
  DType precision;
  OverlapMode mode;
  std::string prefetch;
};

FsdpRun offload_run(const Case& c, bool offload) {
  FsdpRun fsdp;
  fsdp.run = testing::gpt2_run(c.world, 12, 16, 4);
  fsdp.options.strategy = c.strategy;
  if (c.strategy == ShardingStrategy::hybrid_shard) fsdp.options.hybrid_group = 2;
  fsdp.options.param_dtype = c.precision;
  fsdp.options.mode = c.mode;
  fsdp.options.prefetch = parse_prefetch(c.prefetch);
  fsdp.options.offload = offload;
  return fsdp;
}

class FsdpOffload : public ::testing::TestWithParam<Case> {};

TEST_P(FsdpOffload, BitIdenticalToTheDeviceRun) {
  const Case c = GetParam();
  FsdpRun on_device = offload_run(c, false);
  const std::vector<double> expected = testing::losses_of(train_fsdp(on_device, PresetCatalog::builtin(), nullptr));
  FsdpRun offloaded = offload_run(c, true);
  offloaded.keep_op_log = true;
  std::mutex mutex;
  struct Seen {
    TagBytes device{}, host{};
    int to_device = 0, to_host = 0, host_ops = 0;
  };
  std::vector<Seen> seen;
  offloaded.on_rank_done = [&](int, Device& device) {
    Seen s{device.ledger().peak_by_tag(), device.host_ledger().peak_by_tag()};
    for (const OpRecord& op : device.ops()) {
      if (op.lane == Lane::memcpy && op.name.starts_with("copy_to_device")) ++s.to_device;
      if (op.lane == Lane::memcpy && op.name.starts_with("copy_to_host")) ++s.to_host;
      if (op.lane == Lane::host) ++s.host_ops;
    }
    const std::lock_guard<std::mutex> lock(mutex);
    seen.push_back(s);
  };
  EXPECT_EQ(testing::losses_of(train_fsdp(offloaded, PresetCatalog::builtin(), nullptr)), expected);
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(c.world));
  for (const Seen& s : seen) {
    for (MemTag tag : {MemTag::param_shard, MemTag::grad_shard, MemTag::optim_state}) {
      EXPECT_EQ(testing::at(s.device, tag), 0) << mem_tag_name(tag) << " on the device";
      EXPECT_GT(testing::at(s.host, tag), 0) << mem_tag_name(tag) << " in host memory";
    }
    // 3 units, 4 steps: a copy up per gather (forward, and backward where resharded), one down per reduction.
    EXPECT_EQ(s.to_host, 3 * 4);
    EXPECT_GE(s.to_device, 3 * 4);
    EXPECT_GT(s.host_ops, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FsdpOffload,
    ::testing::Values(Case{2, ShardingStrategy::full_shard, DType::f32, OverlapMode::async, "all"},
                      Case{2, ShardingStrategy::full_shard, DType::bf16, OverlapMode::sync, "none"},
                      Case{3, ShardingStrategy::shard_grad_op, DType::f32, OverlapMode::async, "forward,backward-post"},
                      Case{4, ShardingStrategy::hybrid_shard, DType::bf16, OverlapMode::async, "backward-pre"}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return "W" + std::to_string(info.param.world) + "_" + std::string(strategy_name(info.param.strategy)) + "_" +
             std::string(dtype_name(info.param.precision)) + "_" + std::string(overlap_mode_name(info.param.mode));
    });

// SYNC, so the ledger is the formula's: no shard or optimizer state on the device, a shard's f32 copy
// among the staging buffers.
TEST(FsdpOffloadMemory, DeviceLedgerMatchesTheFormula) {
  for (DType precision : {DType::f32, DType::bf16}) {
    FsdpRun fsdp = testing::sync_dry_run(testing::gpt2_run(2, 4, 64, 1, "test-small"));
    fsdp.options.offload = true;
    fsdp.options.param_dtype = precision;
    const BuiltModel built = build_model(fsdp.run);
    const TagBytes formula = fsdp_memory({plan_unit_sizes(*built.model, built.unit_kinds, fsdp.options, 2),
                                          fsdp.options, 2, 2, ModelMemory{}});
    for (const TagBytes& rank : testing::ledger_peaks(fsdp)) {
      for (MemTag tag : {MemTag::param_shard, MemTag::grad_shard, MemTag::optim_state, MemTag::param_full,
                         MemTag::grad_full, MemTag::comm_buffer}) {
        EXPECT_EQ(testing::at(rank, tag), testing::at(formula, tag))
            << mem_tag_name(tag) << " " << dtype_name(precision);
      }
    }
  }
}

TEST(FsdpOffloadMemory, RefusedWithReplicatedStrategies) {
  FsdpRun fsdp = testing::sync_dry_run(testing::gpt2_run(2, 4, 16, 1));
  fsdp.options.offload = true;
  fsdp.options.strategy = ShardingStrategy::zero2;
  const std::string refusal = testing::refusal_of(fsdp);
  EXPECT_NE(refusal.find("--offload with --strategy zero2"), std::string::npos) << refusal;
}

}  // namespace
}  // namespace fsdplab
