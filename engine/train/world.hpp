// world.hpp — runs W ranks as threads of this process, one body per rank, as mpirun runs processes.
#pragma once
#include <functional>

#include "engine/comm/local_comm.hpp"

namespace fsdplab {

// Spawns one thread per rank running body(rank, world) and joins them all. A rank that throws aborts
// the world, so peers waiting for it in a collective fail at once (PeerFailed) instead of hanging;
// then the lowest rank's own failure (the root cause, not the peers' "rank X failed" that follow from
// it; see [Note: which failure a world reports]) is rethrown as an Error naming its rank, carrying the rank's
// own exception as its cause (caused_by, error.hpp) — unless it was a RunStopped (a stopped run,
// run_control.hpp), which is rethrown as it is. W is checked
// (1 .. kMaxLocalRanks) before any thread starts.
void run_world(int world, const std::function<void(int rank, LocalWorld& world)>& body,
               LocalWorldOptions options = {});

}  // namespace fsdplab
