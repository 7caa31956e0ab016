#include "engine/train/world.hpp"

#include <exception>
#include <system_error>
#include <thread>
#include <vector>

#include "engine/runtime/error.hpp"

namespace fsdplab {

void run_world(int world, const std::function<void(int rank, LocalWorld& world)>& body, LocalWorldOptions options) {
  check(world >= 1 && world <= kMaxLocalRanks, "run_world: ", world, " ranks; expected 1 to ", kMaxLocalRanks,
        " (each rank is a thread with its own device)");
  LocalWorld local(world, options);
  const auto run_rank = [&](int rank) {
    try {
      body(rank, local);
    } catch (const std::exception& e) {
      local.abort(rank, e.what());
    } catch (...) {
      local.abort(rank, "an exception that is not a std::exception");
    }
  };
  std::vector<std::thread> threads;
  try {
    for (int r = 0; r < world; ++r) threads.emplace_back(run_rank, r);
  } catch (const std::system_error& e) {
    // The ranks already started must not wait for the ones that never will.
    local.abort(static_cast<int>(threads.size()), std::string("could not start its thread: ") + e.what());
  }
  for (std::thread& t : threads) t.join();
  if (const auto failure = local.failure()) fail("rank ", failure->rank, " failed: ", failure->reason);
}

}  // namespace fsdplab
