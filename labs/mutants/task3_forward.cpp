// Task 3's mutants: ForwardTask (engine/fsdp/forward_task.hpp), each the reference
// (engine/fsdp/forward_reference.cpp) with one pitfall of labs/03-forward/README.md; the methods a
// mutant does not break are the reference's (LikeTheReference). The grader's checks of task 3
// (grader/checks/task3_forward.cpp) must catch every one and name its mistake.
#include "engine/fsdp/forward_task.hpp"
#include "engine/tensor/elementwise.hpp"
#include "labs/mutants/mutants.hpp"

namespace fsdplab {
namespace {

const ForwardTask& reference() { return reference_forward(); }

// Forwards every call to the reference; a mutant overrides the one it gets wrong.
class LikeTheReference : public ForwardTask {
 public:
  explicit LikeTheReference(std::source_location origin = std::source_location::current()) : ForwardTask(origin) {}
  void all_gather(Device& device, Communicator& group, const Tensor& shard, const Tensor& full,
                  Event& gathered) const override {
    reference().all_gather(device, group, shard, full, gathered);
  }
  void wait_for_unshard(Device& device, const Event& gathered) const override {
    reference().wait_for_unshard(device, gathered);
  }
  bool reshard_after_forward(ShardingStrategy strategy, bool is_root) const override {
    return reference().reshard_after_forward(strategy, is_root);
  }
};

// The compute stream never waits for the gather: the race detector names the first reader and the gather.
class MissingWait final : public LikeTheReference {
 public:
  void wait_for_unshard(Device&, const Event&) const override {}  // no device.wait(Lane::compute, gathered)
};

// The wait on the all-gather stream, which is ordered after the gather already: compute still races it.
class WaitsOnTheGatherStream final : public LikeTheReference {
 public:
  void wait_for_unshard(Device& device, const Event& gathered) const override {
    device.wait(Lane::all_gather, gathered);  // not Lane::compute
  }
};

// Compute made to wait for everything on the all-gather stream, not for `gathered`: right numbers, but a unit's
// forward also waits for the gathers prefetched after its own.
class WaitsForTheWholeGatherStream final : public LikeTheReference {
 public:
  void wait_for_unshard(Device& device, const Event&) const override {
    device.wait_stream(Lane::compute, Lane::all_gather);
  }
};

// The host waits for the gather instead of the compute stream: right numbers, no overlap.
class HostSync final : public LikeTheReference {
 public:
  void wait_for_unshard(Device& device, const Event& gathered) const override {
    device.synchronize(gathered);  // not device.wait(Lane::compute, gathered)
  }
};

// The host waits for the whole device instead of the compute stream for the gather: right numbers, no overlap, and
// the host held for every stream's work besides.
class HostSyncWholeDevice final : public LikeTheReference {
 public:
  void wait_for_unshard(Device& device, const Event&) const override {
    device.synchronize();  // not device.wait(Lane::compute, gathered)
  }
};

// The gather issued on the compute stream (and its event recorded there): compute waits for the link.
class GatherOnCompute final : public LikeTheReference {
 public:
  void all_gather(Device& device, Communicator& group, const Tensor& shard, const Tensor& full,
                  Event& gathered) const override {
    group.all_gather(device.stream(Lane::compute), shard, full);
    device.record(gathered, Lane::compute);
  }
};

// The event recorded before the gather is issued: it marks nothing, so waiting on it orders nothing.
class RecordBeforeGather final : public LikeTheReference {
 public:
  void all_gather(Device& device, Communicator& group, const Tensor& shard, const Tensor& full,
                  Event& gathered) const override {
    device.record(gathered, Lane::all_gather);
    group.all_gather(device.stream(Lane::all_gather), shard, full);
  }
};

// The event never recorded: compute's wait on it is an error.
class NeverRecords final : public LikeTheReference {
 public:
  void all_gather(Device& device, Communicator& group, const Tensor& shard, const Tensor& full,
                  Event&) const override {
    group.all_gather(device.stream(Lane::all_gather), shard, full);  // no device.record(gathered, ...)
  }
};

// The gather issued twice, its event behind the second: the same values, twice the link's time and traffic.
class GathersTwice final : public LikeTheReference {
 public:
  void all_gather(Device& device, Communicator& group, const Tensor& shard, const Tensor& full,
                  Event& gathered) const override {
    group.all_gather(device.stream(Lane::all_gather), shard, full);
    group.all_gather(device.stream(Lane::all_gather), shard, full);
    device.record(gathered, Lane::all_gather);
  }
};

// Compute made to wait for the gather as soon as it is issued: for a prefetch, the unit computing now waits for the
// next unit's parameters, so nothing overlaps.
class WaitsInAllGather final : public LikeTheReference {
 public:
  void all_gather(Device& device, Communicator& group, const Tensor& shard, const Tensor& full,
                  Event& gathered) const override {
    reference().all_gather(device, group, shard, full, gathered);
    device.wait(Lane::compute, gathered);  // belongs in wait_for_unshard alone
  }
};

// The gather made to wait for the compute stream first: a prefetch then cannot run under the computing unit.
class GatherWaitsForCompute final : public LikeTheReference {
 public:
  void all_gather(Device& device, Communicator& group, const Tensor& shard, const Tensor& full,
                  Event& gathered) const override {
    device.wait_stream(Lane::all_gather, Lane::compute);
    reference().all_gather(device, group, shard, full, gathered);
  }
};

// The host waits for the whole device before each gather: right numbers, the gathers issued late.
class SyncBeforeGather final : public LikeTheReference {
 public:
  void all_gather(Device& device, Communicator& group, const Tensor& shard, const Tensor& full,
                  Event& gathered) const override {
    device.synchronize();
    reference().all_gather(device, group, shard, full, gathered);
  }
};

// Units resharded under the replicated strategies too (only grad_op excepted): under bf16 their 16-bit copies are
// made again for the backward.
class ReshardsReplicated final : public LikeTheReference {
 public:
  bool reshard_after_forward(ShardingStrategy strategy, bool is_root) const override {
    return !is_root && strategy != ShardingStrategy::shard_grad_op;
  }
};

// The root is freed after forward too, and gathered again as the first thing of the backward.
class ReshardsRoot final : public LikeTheReference {
 public:
  bool reshard_after_forward(ShardingStrategy strategy, bool) const override {
    return reshards_after_forward(strategy);  // is_root left out
  }
};

// Nothing is freed after forward: every unit stays gathered until its backward (SHARD_GRAD_OP's memory).
class NeverReshards final : public LikeTheReference {
 public:
  bool reshard_after_forward(ShardingStrategy, bool) const override { return false; }
};

// The strategy ignored: every unit but the root is freed after forward, so grad_op behaves like full.
class IgnoresStrategy final : public LikeTheReference {
 public:
  bool reshard_after_forward(ShardingStrategy, bool is_root) const override { return !is_root; }
};

// "Nothing to gather on one rank": at W = 1 the shard is copied into full on the compute stream and `gathered`
// recorded there. Right in f32; under bf16 (the lifecycle's cast) or --offload (the H2D copy) the copy reads what
// the all-gather / memcpy stream wrote, unordered: a race. gather-stream calls all_gather at W = 1 too.
class CopiesOnComputeAtW1 final : public LikeTheReference {
 public:
  void all_gather(Device& device, Communicator& group, const Tensor& shard, const Tensor& full,
                  Event& gathered) const override {
    if (group.world() > 1) {
      reference().all_gather(device, group, shard, full, gathered);
      return;
    }
    copy(device.stream(Lane::compute), shard, full);  // not a gather on the all-gather stream
    device.record(gathered, Lane::compute);
  }
};

}  // namespace

std::span<const Mutant> forward_mutants() {
  static const Mutant mutants[] = {
      {3, "missing-wait", "wait_for_unshard does not make the compute stream wait for the gather's event",
       instance<MissingWait>},
      {3, "waits-on-the-gather-stream", "wait_for_unshard makes the all-gather stream wait for the event, not compute",
       instance<WaitsOnTheGatherStream>},
      {3, "waits-for-the-whole-gather-stream",
       "wait_for_unshard makes compute wait for all the all-gather stream's work (wait_stream), not the event",
       instance<WaitsForTheWholeGatherStream>},
      {3, "host-sync", "a host sync (device.synchronize(gathered)) instead of a compute-stream wait on the event",
       instance<HostSync>},
      {3, "host-sync-whole-device",
       "a host sync of the whole device (device.synchronize()) instead of a compute-stream wait on the event",
       instance<HostSyncWholeDevice>},
      {3, "gather-on-compute", "the all-gather is issued on the compute stream instead of the all-gather stream",
       instance<GatherOnCompute>},
      {3, "record-before-gather", "the event is recorded before the gather is issued, so it marks nothing",
       instance<RecordBeforeGather>},
      {3, "never-records", "all_gather never records the gathered event, so the compute stream waits on nothing",
       instance<NeverRecords>},
      {3, "gathers-twice", "all_gather issues the gather twice (the same values, twice the link's time)",
       instance<GathersTwice>},
      {3, "waits-in-all-gather", "all_gather makes the compute stream wait for the gather it issued",
       instance<WaitsInAllGather>},
      {3, "gather-waits-for-compute", "all_gather makes the all-gather stream wait for the compute stream first",
       instance<GatherWaitsForCompute>},
      {3, "sync-before-gather", "all_gather synchronizes the whole device before issuing the gather",
       instance<SyncBeforeGather>},
      {3, "reshards-replicated", "reshard_after_forward is true under no_shard, zero1 and zero2 too",
       instance<ReshardsReplicated>},
      {3, "reshards-root", "reshard_after_forward is true for the root unit too", instance<ReshardsRoot>},
      {3, "never-reshards", "reshard_after_forward is always false: no unit is freed after its forward",
       instance<NeverReshards>},
      {3, "ignores-strategy", "reshard_after_forward ignores the strategy (!is_root): grad_op frees units as full does",
       instance<IgnoresStrategy>},
      {3, "copies-on-compute-at-w1",
       "at W = 1 the shard is copied into full on the compute stream (no gather on the all-gather stream)",
       instance<CopiesOnComputeAtW1>},
  };
  return mutants;
}

}  // namespace fsdplab
