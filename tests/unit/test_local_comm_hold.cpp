// LocalWorldOptions::hold: while it returns true, ranks waiting in a collective for a peer do not count
// the world's no-progress timeout (a paused step-through holds a rank on purpose); once it returns false
// the timeout counts again, and a stalled peer is reported as without a hold.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/comm/local_comm.hpp"
#include "engine/train/world.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using namespace std::chrono_literals;
using testing::contains;
using testing::error_of;

TEST(LocalCommHold, AHeldWorldWaitsPastItsTimeout) {
  LocalWorldOptions options;
  options.timeout = 100ms;
  options.hold = [] { return true; };
  run_world(2, [&](int rank, LocalWorld& world) {
    auto device = testing::make_sim_device(rank);
    LocalComm comm(world, rank, *device);
    // Four timeouts late, and still held when it arrives: released before the barrier, rank 0 would count its
    // wait again from its last look at the hold, and a rank 1 slow to get there would fail the test.
    if (rank == 1) std::this_thread::sleep_for(400ms);
    comm.barrier();
  }, options);
}

TEST(LocalCommHold, ReleasedTheTimeoutCountsAgain) {
  std::atomic<bool> held{true};
  std::atomic<bool> finish{false};
  LocalWorldOptions options;
  options.timeout = 100ms;
  options.hold = [&] { return held.load(); };
  const std::string error = error_of([&] {
    run_world(2, [&](int rank, LocalWorld& world) {
      auto device = testing::make_sim_device(rank);
      LocalComm comm(world, rank, *device);
      if (rank == 1) {
        std::this_thread::sleep_for(200ms);
        held = false;  // and never comes: rank 0 gives up a timeout later
        while (!finish) std::this_thread::sleep_for(5ms);
        return;
      }
      try {
        comm.barrier();
      } catch (...) {
        finish = true;
        throw;
      }
    }, options);
  });
  EXPECT_TRUE(contains(error, "rank 0 waited 0.1 s in barrier #1 of group [0, 1]; rank 1 never arrived")) << error;
}

}  // namespace
}  // namespace fsdplab
