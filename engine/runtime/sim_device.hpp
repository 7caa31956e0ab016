// sim_device.hpp — the device that runs everywhere: real numerics on the host, time on a virtual clock.
//
// Each stream has a cursor (`ready`: when its last op ends). Launching an op costs the host the
// preset's launch overhead; the op starts at the latest of its stream's cursor, the events the stream
// waits for, and the host's time after the launch, and lasts what the cost model says. A host
// synchronisation moves the host cursor to the event's time. So the CPU running ahead of the GPU,
// SYNC against ASYNC, and a sync that stalls the pipeline all show up in the timeline, identically
// on every run and every machine. The numerics run at launch, in program order, so results never
// depend on the schedule; the race detector reports the schedules that would corrupt them on a GPU.
//
// Each rank has a link to the ranks of its node, which its collectives take one at a time in the order
// they are issued, whichever stream issued them: NCCL runs a communicator's collectives in order on one
// internal stream, and two at once would share the link's bandwidth anyway. So a reduce-scatter issued
// before the next all-gather delays it, which is why backward needs explicit prefetch to overlap at all.
// On several nodes (--ranks-per-node) a rank also has the network to the other nodes, a second link that
// carries, one at a time, the collectives whose group spans nodes: HYBRID_SHARD's all-reduce across nodes
// runs there while the next all-gather runs within the node, as on NVLink and a network card.
#pragma once
#include <array>
#include <memory>
#include <span>
#include <vector>

#include "engine/runtime/caching_allocator.hpp"
#include "engine/runtime/device.hpp"
#include "engine/runtime/race_detector.hpp"

namespace fsdplab {

struct SimDeviceOptions {
  bool dry_run = false;
  RaceDetector::Policy races = RaceDetector::Policy::throw_error;
  NodeLayout nodes;  // where the ranks sit: which link a collective's group runs on (cost_model.hpp)
};

class SimDevice final : public Device {
 public:
  SimDevice(int rank, DevicePreset device, LinkPreset link, SimDeviceOptions options = {});
  ~SimDevice() override;

  DeviceKind kind() const override { return DeviceKind::sim; }
  bool dry_run() const override { return options_.dry_run; }
  const CostModel& cost_model() const override { return cost_; }

  OpId launch(Lane lane, OpSpec spec, const OpBody& body) override;
  SimTime earliest_start(Lane lane, OpCategory category, RankLink link) const override;
  void record(Event& event, Lane lane) override;
  void wait(Lane lane, const Event& event) override;
  void synchronize(const Event& event) override;
  void synchronize(Lane lane) override;
  void synchronize() override;
  bool completed(const Event& event) override;
  void host_work(const std::string& name, SimTime duration) override;
  SimTime host_time() const override { return host_; }
  void host_read(const Access& access, std::byte* to, const std::string& what) override;
  void host_write(const Access& access, const std::byte* from, const std::string& what) override;
  void check_raw_pointer(const Block& block, const std::string& storage) const override;

  Allocation allocate(std::int64_t bytes, MemTag tag, Lane stream = Lane::compute) override;

  const RaceDetector& race_detector() const { return races_; }

 private:
  void free(Block* block) override;
  struct StreamState {
    SimTime ready = 0;
    VectorClock clock{};
    OpId last_op = 0;
    std::vector<OpRef> pending_deps;  // waits (events, freed blocks) not yet consumed by an op
  };
  StreamState& state(Lane lane);
  const StreamState& state(Lane lane) const;
  // The block `access` names, in the allocation it was made in; an Error naming `op_name` otherwise.
  Block& live_block(const Access& access, const std::string& op_name);
  std::array<VectorClock, kLaneCount> lane_clocks() const;
  OpId launch_on_host(OpSpec spec, const OpBody& body);
  void run_host_body(const std::string& op, const OpBody& body) const;
  // The host touches `access` now: checked for races against the streams, then recorded.
  Block& host_access(const Access& access, bool write, const std::string& what);
  // Before an op (or a host access) runs: each access within its buffer, and ordered after the buffer's
  // earlier conflicting accesses (the race detector), or an Error naming both.
  void check_accesses(std::span<const Access> reads, std::span<const Access> writes, const Accessor& who,
                      const VectorClock& clock);
  // After it ran: its accesses become the ones later accesses are checked against.
  void commit_accesses(std::span<const Access> reads, std::span<const Access> writes, const Accessor& who);

  // Whether the host, asking about `event`'s record again and again at this same host time and hearing 'no', is
  // spinning on it; then spin_to_the_next_end moves its clock to the earliest end of the records it asked about. See
  // [Note: a host that polls an event] (sim_device.cpp).
  bool spins_on(const Event& event);
  void spin_to_the_next_end();

  SimDeviceOptions options_;
  CostModel cost_;
  std::array<StreamState, kStreamCount> streams_;
  SimTime host_ = 0;
  std::array<SimTime, kRankLinkCount> link_ready_{};  // when this rank's last collective on each link ends
  VectorClock host_clock_{};
  OpId next_op_ = 1;
  RaceDetector races_;
  // The records the host asked about and heard 'no', all at host time `unanswered_at_`, and how many times each
  // (spins_on).
  struct Record {
    Lane lane;
    OpRef last_op;
    SimTime time;
    friend bool operator==(const Record&, const Record&) = default;
  };
  struct Unanswered {
    Record record;
    int times;
  };
  std::vector<Unanswered> unanswered_;
  SimTime unanswered_at_ = -1;

  // Host memory under the cuda device's CachingAllocator: [Note: a block that crosses streams].
  class Memory;
  std::unique_ptr<Memory> memory_;
  CachingAllocator allocator_;  // after what it calls back into: destroyed first
};

}  // namespace fsdplab
