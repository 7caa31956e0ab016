// cpu_offload.hpp — the two crossings CPU offload adds to a unit's step (FsdpOptions::offload): its f32
// master shard to the device before a gather, its reduced gradient shard back to the host after a
// reduction. Both run on the memcpy stream, so PCIe transfers show as their own lane and overlap the
// collectives and compute like any other stream; events order them, never the host.
#pragma once
#include "engine/fsdp/fsdp_unit.hpp"

namespace fsdplab {

bool offloaded(const FsdpUnit& unit);

// The unit's f32 master shard where the all-gather stream can read it: the master itself, or for an
// offloaded unit a device copy made on the memcpy stream, which the all-gather stream then waits for.
// The caller releases a copy once the gather that read it is done (it overlaps no master).
Tensor shard_on_device(const FsdpUnit& unit, FsdpRank& rank, const std::string& purpose);

// For an offloaded unit: a device buffer the reduction can write the f32 gradient shard into (on the
// reduce-scatter stream's pool); otherwise unit.grad_shard itself.
Tensor grad_shard_on_device(const FsdpUnit& unit, FsdpRank& rank);
// After the reduction into `device_grad` was issued: copies it into the host grad shard on the memcpy
// stream and returns the stream whose work completes the gradient (memcpy, or reduce_scatter when
// nothing was offloaded), where `unit.reduced` is to be recorded.
Lane finish_grad_shard(const FsdpUnit& unit, FsdpRank& rank, const Tensor& device_grad);

}  // namespace fsdplab
