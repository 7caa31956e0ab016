// NcclComm on real GPUs: every collective with one rank (the most one GPU allows), the full FSDP training
// loop over NCCL equal to the baseline, and, where the machine has two GPUs or more, two ranks equal to
// the sim device's run and a failing rank that aborts its peer instead of leaving it inside a collective.
// Each test skips, saying why, where the build or the machine lacks what it needs.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>
#include <set>

#include "../integration/fsdp_runs.hpp"
#include "gpu_runs.hpp"
#include "engine/comm/nccl_comm.hpp"
#include "engine/runtime/device_factory.hpp"
#include "engine/trace/trace_recorder.hpp"
#include "engine/train/rank_launch.hpp"
#include "test_support.hpp"

#if FSDPLAB_HAVE_CUDA
#include "engine/cuda/comm_kernels.hpp"
#endif

namespace fsdplab {
namespace {

using namespace testing;

class NcclCommTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = cuda_unavailable()) GTEST_SKIP() << "cuda device: " << *why;
    if (auto why = nccl_unavailable()) GTEST_SKIP() << "nccl: " << *why;
  }
  // The reason a test needing `n` GPUs cannot run here; the test skips with it (GTEST_SKIP in a helper would
  // only leave the helper).
  static std::optional<std::string> too_few_gpus(int n) {
    if (usable_gpu_count() >= n) return std::nullopt;
    return "needs " + std::to_string(n) + " GPUs; this machine has " + std::to_string(usable_gpu_count());
  }
  static DeviceSpec spec(int gpu) {
    DeviceSpec s;
    s.kind = DeviceKind::cuda;
    s.preset = PresetCatalog::builtin().device("h100-sxm");
    s.link = PresetCatalog::builtin().link_for(s.preset, "");
    s.gpu = gpu;
    return s;
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
    // In place: rank 0's chunk of full, with one rank full itself.
    comm->all_gather(s, full, full);
    comm->reduce_scatter(s, full, full, ReduceOp::sum);
    // bf16's average is NCCL's sum, then a division in f32 on the same stream (nccl_comm.cpp, [Note: averaging
    // bf16 on NCCL]); the values are exact in bf16.
    const Tensor half = tensor_from(*device, {4}, values, DType::bf16);
    comm->all_reduce(s, half, ReduceOp::avg);
    comm->reduce_scatter(s, half, half, ReduceOp::avg);
    device->synchronize();
    EXPECT_EQ(read(full), values);
    EXPECT_EQ(read(half), values);
  }, scaled_world_options());
}

// The watchdog and the abort with one rank: a collective held behind four seconds of work on its stream is
// overdue after the group's 1.5 s (both scaled, gpu_runs.hpp; joining NCCL may take longer, under a limit of
// its own), the watchdog reports it and aborts NCCL, and every later call fails naming the first failure
// instead of entering NCCL.
TEST_F(NcclCommTest, TheWatchdogAbortsACollectiveThatNeverCompletes) {
#if FSDPLAB_HAVE_CUDA
  auto device = make_device(0, spec(0));
  std::mutex mutex;
  std::vector<std::string> reported;
  const std::chrono::milliseconds watchdog = scaled(std::chrono::milliseconds(1500));
  NcclAbortGroup aborts(watchdog, [&](const std::string& why) {
    std::lock_guard lock(mutex);
    reported.push_back(why);
  });
  {
    NcclComm comm(make_nccl_id(), 1, 0, *device, aborts);
    const Tensor t = tensor_from(*device, {4}, std::vector<float>{1.f, 2.f, 3.f, 4.f});
    const Stream s = device->stream(Lane::all_gather);
    OpSpec hold;
    hold.name = "work that outlasts the watchdog";
    const std::chrono::nanoseconds held = scaled(std::chrono::milliseconds(4000));
    device->launch(s.lane, hold, {.cuda = [&](CUstream_st* stream) { cuda::spin(stream, held.count()); }});
    comm.all_reduce(s, t, ReduceOp::sum);
    const auto start = std::chrono::steady_clock::now();
    while (!aborts.failure() && std::chrono::steady_clock::now() - start < held)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(aborts.failure()) << "the watchdog never fired";
    EXPECT_TRUE(contains(*aborts.failure(), "has not completed after " + std::to_string(watchdog.count()) + " ms"))
        << *aborts.failure();
    const std::string later = error_of([&] { comm.all_reduce(s, t, ReduceOp::sum); });
    EXPECT_TRUE(contains(later, "NCCL was aborted")) << later;
    device->synchronize();  // the spin ends; an aborted communicator's work is left to the driver
  }
  std::lock_guard lock(mutex);
  ASSERT_EQ(reported.size(), 1u);
  EXPECT_TRUE(contains(reported.front(), "all_reduce")) << reported.front();
#endif
}

// An abort asked for by the program (a rank failed elsewhere) stops the next call before it enters NCCL.
TEST_F(NcclCommTest, AnAbortStopsTheNextCollectiveWithItsReason) {
#if FSDPLAB_HAVE_CUDA
  auto device = make_device(0, spec(0));
  NcclAbortGroup aborts(scaled(std::chrono::milliseconds(5000)));
  NcclComm comm(make_nccl_id(), 1, 0, *device, aborts);
  const Tensor t = tensor_from(*device, {4}, std::vector<float>{1.f, 2.f, 3.f, 4.f});
  comm.all_reduce(device->stream(Lane::all_gather), t, ReduceOp::sum);
  device->synchronize();
  aborts.abort(3, "its data loader died");
  const std::string message = error_of([&] { comm.barrier(); });
  EXPECT_TRUE(contains(message, "rank 3 failed: its data loader died")) << message;
#endif
}

TEST_F(NcclCommTest, OneRankTrainsTheFullLoopLikeTheBaseline) {
  const RunConfig run = nccl_run(1);
  const RunConfig baseline_run = on_sim(run);
  const std::vector<double> baseline = losses_of(train_baseline(baseline_run, PresetCatalog::builtin(), {}, nullptr));
  FsdpRun fsdp = gpu_fsdp(run);
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
  if (auto why = too_few_gpus(2)) GTEST_SKIP() << *why;
  const FsdpRun sim = gpu_fsdp(on_sim(nccl_run(2)));
  const FsdpRun on_nccl = gpu_fsdp(nccl_run(2));
  const std::vector<double> want = losses_of(train_fsdp(sim, PresetCatalog::builtin(), {}));
  const std::vector<double> got = losses_of(train_fsdp(on_nccl, PresetCatalog::builtin(), {}));
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * std::abs(want[i])) << "step " << i;
}

TEST_F(NcclCommTest, AFailingRankAbortsItsPeerInsteadOfHangingIt) {
  if (auto why = too_few_gpus(2)) GTEST_SKIP() << *why;
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
    }, scaled_world_options());
    FAIL() << "run_ranks returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 failed: rank 1 gives up before its all_gather"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fsdplab
