// NcclComm on real GPUs: every collective with one rank (the most one GPU allows), the full FSDP training
// loop over NCCL equal to the baseline, and, where the machine has two GPUs or more, two ranks equal to
// the sim device's run and a failing rank that aborts its peer instead of leaving it inside a collective.
// Each test skips, saying why, where the build or the machine lacks what it needs.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "../integration/fsdp_runs.hpp"
#include "engine/comm/nccl_comm.hpp"
#include "engine/runtime/device_factory.hpp"
#include "engine/trace/trace_recorder.hpp"
#include "engine/train/rank_launch.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using namespace testing;

class NcclCommTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = cuda_unavailable()) GTEST_SKIP() << "cuda device: " << *why;
    if (auto why = nccl_unavailable()) GTEST_SKIP() << "nccl: " << *why;
  }
  static void need_gpus(int n) {
    if (usable_gpu_count() < n) GTEST_SKIP() << "needs " << n << " GPUs; this machine has " << usable_gpu_count();
  }
  static DeviceSpec spec(int gpu) {
    DeviceSpec s;
    s.kind = DeviceKind::cuda;
    s.preset = PresetCatalog::builtin().device("h100-sxm");
    s.link = PresetCatalog::builtin().link_for(s.preset, "");
    s.gpu = gpu;
    return s;
  }
  static RunConfig nccl_run(int world) {
    RunConfig run = gpt2_run(world, 8, 32, 5);
    run.device = "cuda";
    run.comm = "nccl";
    return run;
  }
};

TEST_F(NcclCommTest, EveryCollectiveWithOneRank) {
  const RankLayout layout = rank_layout("nccl", 1, DeviceKind::cuda, 0);
  run_ranks(layout, [&](RankSeat& seat) {
    auto device = make_device(seat.rank(), spec(seat.gpu()));
    const std::unique_ptr<Communicator> comm = seat.connect(*device);
    const Stream s = device->stream(Lane::all_gather);
    const std::vector<float> values = {1.5f, -2.f, 3.25f, 4.f};
    const Tensor shard = tensor_from(*device, {4}, values);
    const Tensor full = Tensor::empty(*device, {4}, DType::f32, MemTag::param_full, "full");
    comm->all_gather(s, shard, full);
    const Tensor reduced = Tensor::empty(*device, {4}, DType::f32, MemTag::grad_shard, "reduced");
    comm->reduce_scatter(s, full, reduced, ReduceOp::avg);
    comm->all_reduce(s, reduced, ReduceOp::sum);
    comm->broadcast(s, reduced, 0);
    device->synchronize();
    EXPECT_EQ(read(full), values);
    EXPECT_EQ(read(reduced), values);
    comm->barrier();
    const std::unique_ptr<Communicator> alone = comm->split(0);
    EXPECT_EQ(alone->world(), 1);
    alone->all_reduce(s, reduced, ReduceOp::sum);
    device->synchronize();
    EXPECT_EQ(read(reduced), values);
  });
}

TEST_F(NcclCommTest, OneRankTrainsTheFullLoopLikeTheBaseline) {
  const RunConfig run = nccl_run(1);
  RunConfig baseline_run = run;
  baseline_run.device = "sim";
  baseline_run.comm = "local";
  const std::vector<double> baseline = losses_of(train_baseline(baseline_run, PresetCatalog::builtin(), {}, nullptr));
  FsdpRun fsdp;
  fsdp.run = run;
  TraceRecorder recorder;
  fsdp.sinks = {&recorder};
  const std::vector<double> losses = losses_of(train_fsdp(fsdp, PresetCatalog::builtin(), {}));
  ASSERT_EQ(losses.size(), baseline.size());
  for (std::size_t i = 0; i < losses.size(); ++i)
    EXPECT_NEAR(losses[i], baseline[i], 1e-4 * std::abs(baseline[i])) << "step " << i;
  std::set<std::pair<Lane, OpCategory>> seen;
  for (const TraceEvent& e : recorder.data().events) seen.insert({e.lane, e.category});
  EXPECT_TRUE(seen.count({Lane::all_gather, OpCategory::all_gather}));
  EXPECT_TRUE(seen.count({Lane::reduce_scatter, OpCategory::reduce_scatter}));
}

TEST_F(NcclCommTest, TwoGpusTrainLikeTheSimDevice) {
  need_gpus(2);
  RunConfig sim_run = nccl_run(2);
  sim_run.device = "sim";
  sim_run.comm = "local";
  FsdpRun on_sim;
  on_sim.run = sim_run;
  FsdpRun on_nccl;
  on_nccl.run = nccl_run(2);
  const std::vector<double> want = losses_of(train_fsdp(on_sim, PresetCatalog::builtin(), {}));
  const std::vector<double> got = losses_of(train_fsdp(on_nccl, PresetCatalog::builtin(), {}));
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * std::abs(want[i])) << "step " << i;
}

TEST_F(NcclCommTest, AFailingRankAbortsItsPeerInsteadOfHangingIt) {
  need_gpus(2);
  const RankLayout layout = rank_layout("nccl", 2, DeviceKind::cuda, 0);
  try {
    run_ranks(layout, [&](RankSeat& seat) {
      auto device = make_device(seat.rank(), spec(seat.gpu()));
      const std::unique_ptr<Communicator> comm = seat.connect(*device);
      const Tensor shard = Tensor::empty(*device, {1024}, DType::f32, MemTag::param_shard, "shard");
      const Tensor full = Tensor::empty(*device, {2048}, DType::f32, MemTag::param_full, "full");
      if (seat.rank() == 1) throw Error("rank 1 gives up before its all_gather");
      // Rank 0's all_gather waits for a peer that never comes, until rank 1's failure aborts NCCL.
      comm->all_gather(device->stream(Lane::all_gather), shard, full);
      device->synchronize();
    });
    FAIL() << "run_ranks returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 failed: rank 1 gives up before its all_gather"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fsdplab
