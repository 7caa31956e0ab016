#include "engine/train/world.hpp"

#include <exception>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

#include "engine/runtime/error.hpp"
#include "engine/runtime/host_memory_limit.hpp"
#include "engine/train/run_control.hpp"

namespace fsdplab {

void run_world(int world, const std::function<void(int rank, LocalWorld& world)>& body, LocalWorldOptions options) {
  check(world >= 1 && world <= kMaxLocalRanks, "run_world: ", world, " ranks; expected 1 to ", kMaxLocalRanks,
        " (each rank is a thread with its own device)");
  LocalWorld local(world, options);
  // A stopped run (RunControl::stop) is no failure: its RunStopped is rethrown as it is. Each thread
  // writes only its own slot, read after the join.
  std::vector<std::exception_ptr> stops(static_cast<std::size_t>(world));
  const auto run_rank = [&](int rank) {
    try {
      body(rank, local);
    } catch (const RunStopped& e) {
      stops[static_cast<std::size_t>(rank)] = std::current_exception();
      local.abort(rank, e.what());
    } catch (const std::bad_alloc&) {
      local.abort(rank, out_of_memory_message("in this rank's thread"));
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
  if (const auto failure = local.failure()) {
    // The first failure is the cause; the peers' errors follow from it.
    if (failure->rank >= 0 && failure->rank < world && stops[static_cast<std::size_t>(failure->rank)])
      std::rethrow_exception(stops[static_cast<std::size_t>(failure->rank)]);
    fail("rank ", failure->rank, " failed: ", failure->reason);
  }
}

}  // namespace fsdplab
