// Where a run's ranks go (rank_launch.hpp): threads for --comm local, and every request this machine or
// build cannot serve refused before anything starts, saying what to do instead. The process paths run
// under a real mpirun in tests/mpi.
#include <gtest/gtest.h>

#include <atomic>

#include "engine/comm/mpi_comm.hpp"
#include "engine/comm/nccl_comm.hpp"
#include "engine/runtime/device_factory.hpp"
#include "engine/runtime/error.hpp"
#include "engine/train/rank_launch.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using namespace testing;

void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "expected \"" << part << "\" in: " << text;
}

std::string refusal(std::string_view comm, int world, DeviceKind device) {
  try {
    rank_layout(comm, world, device, 0);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RankLaunch, LocalRunsEveryRankAsAThreadOfThisProcess) {
  const RankLayout layout = rank_layout("local", 3, DeviceKind::sim, 0);
  EXPECT_EQ(layout.comm, CommKind::local);
  EXPECT_EQ(layout.world, 3);
  EXPECT_FALSE(layout.processes);
  EXPECT_EQ(layout.ranks_here, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(layout.reports());

  std::atomic<int> seen{0};
  run_ranks(layout, [&](RankSeat& seat) {
    auto device = make_sim_device(seat.rank());
    const std::unique_ptr<Communicator> comm = seat.connect(*device);
    EXPECT_EQ(comm->rank(), seat.rank());
    EXPECT_EQ(comm->world(), 3);
    EXPECT_EQ(seat.gpu(), 0);
    // Every thread of --comm local computes on the same GPU: each is one of 3 there (its share of the SMs).
    EXPECT_EQ(seat.ranks_on_gpu(), 3);
    EXPECT_EQ(seat.index_on_gpu(), seat.rank());
    comm->barrier();
    seen += 1 << seat.rank();
  });
  EXPECT_EQ(seen, 0b111);
  // Threads have every rank's report already.
  EXPECT_EQ(gather_for_report(layout, {"a", "b", "c"}), (std::vector<std::string>{"a", "b", "c"}));
}

TEST(RankLaunch, ARankThatFailsIsReportedByItsRank) {
  const RankLayout layout = rank_layout("local", 2, DeviceKind::sim, 0);
  try {
    run_ranks(layout, [&](RankSeat& seat) {
      auto device = make_sim_device(seat.rank());
      const std::unique_ptr<Communicator> comm = seat.connect(*device);
      if (seat.rank() == 1) fail("broken on purpose");
      comm->barrier();
    });
    FAIL() << "run_ranks returned";
  } catch (const Error& e) {
    expect_has(e.what(), "rank 1 failed: broken on purpose");
  }
}

TEST(RankLaunch, RefusesWhatTheCommunicatorCannotCarry) {
  expect_has(refusal("tcp", 2, DeviceKind::sim), "--comm 'tcp'; expected local");
  expect_has(refusal("nccl", 2, DeviceKind::sim), "--comm nccl moves data between GPUs; this run is on the sim device");
  expect_has(refusal("mpi", 2, DeviceKind::cuda), "on GPUs use --comm nccl");
}

TEST(RankLaunch, NcclNeedsAGpuPerRankAndPointsToLocal) {
  const std::string why = refusal("nccl", usable_gpu_count() + 1, DeviceKind::cuda);
  if (auto missing = nccl_unavailable()) {
    expect_has(why, *missing);
  } else {
    expect_has(why, "NCCL refuses two ranks on one GPU");
    expect_has(why, "usable GPU");
  }
  expect_has(why, "use --comm local");
}

TEST(RankLaunch, MpiRanksAreProcessesOfALauncher) {
  if (launched_by_mpi()) GTEST_SKIP() << "this test process was itself started by an MPI launcher";
  const std::string why = refusal("mpi", 2, DeviceKind::sim);
  if (auto missing = mpi_unavailable()) {
    expect_has(why, *missing);
  } else {
    expect_has(why, "run `mpirun -np 2 fsdplab run ... --comm mpi`");
  }
}

}  // namespace
}  // namespace fsdplab
