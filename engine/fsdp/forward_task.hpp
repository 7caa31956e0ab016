// forward_task.hpp — task 3 of the lab: gather a unit before its forward, free it after.
//
// The engine's unit lifecycle (unit_lifecycle.hpp) runs a unit through sharded -> gathering ->
// unsharded -> sharded and calls this task for the three decisions of the forward:
//   unshard            all_gather: every rank's shard into the unit's full buffer, on the all-gather
//                      stream, with an event recorded behind it
//   wait_for_unshard   the compute stream waits for that event before it computes with the unit
//   reshard            reshard_after_forward: whether the unit's gathered parameters are freed right
//                      after its forward (asked once per unit, when the model is wrapped; the
//                      lifecycle then frees them in each post-forward)
// Which memory the gather writes into and when a freed buffer can be reused are task 6's; casting to a
// lower precision and CPU offload are layers the lifecycle adds around the gather. Exercise: labs/03-forward.
#pragma once
#include "engine/comm/communicator.hpp"
#include "engine/fsdp/fsdp_task.hpp"
#include "engine/fsdp/sharding.hpp"
#include "engine/runtime/event.hpp"

namespace fsdplab {

class ForwardTask : public FsdpTask {
 public:
  // The implementing class's file and line, for step-through (fsdp_task.hpp).
  explicit ForwardTask(std::source_location origin = std::source_location::current()) : FsdpTask(origin) {}

  // Issues the all-gather of `shard` (this rank's chunk, in the dtype the unit computes in) from every
  // rank of `group` into `full` (group.world() chunks, in rank order), on the device's all-gather stream,
  // and records `gathered` on that stream behind it. The host does not wait for the gather.
  virtual void all_gather(Device& device, Communicator& group, const Tensor& shard, const Tensor& full,
                          Event& gathered) const = 0;
  // Before the unit computes: work issued to the compute stream from now on starts after the gather
  // that recorded `gathered` — and nothing else is waited for, on the device or the host.
  // See [Note: an event wait, not a host sync] below.
  virtual void wait_for_unshard(Device& device, const Event& gathered) const = 0;
  // Whether a unit's gathered parameters are freed right after its forward under `strategy`. The root
  // unit (`is_root`) holds the parameters its backward needs first.
  virtual bool reshard_after_forward(ShardingStrategy strategy, bool is_root) const = 0;
};

// [Note: an event wait, not a host sync]
// The compute stream must not read the parameters before the gather has written them. Two ways to
// ensure it: the host waits for the gather (a synchronize), or the compute stream waits for an event the
// all-gather stream recorded. The host wait stops the CPU from issuing anything else — later gathers,
// this unit's kernels — until the link is done, so nothing overlaps. The event wait is an instruction to
// the device: the host goes on issuing work at once, the gathers of the next units run while this one
// computes, and only this unit's compute waits, only for its own gather. The sim device's race detector
// reports the missing wait (a read of memory that no event orders after its writer, even where the timing
// happened to let the writer finish first), naming both ops.

// The reference implementation (forward_reference.cpp).
const ForwardTask& reference_forward();

}  // namespace fsdplab
