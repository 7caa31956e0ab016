// race_detector.hpp — finds stream races on one device: two accesses to overlapping bytes of a
// memory block, at least one a write, that nothing orders.
//
// "Ordered" is happens-before, tracked with vector clocks (one entry per lane): an op happens after
// everything its stream ran before it, everything the host had seen when it was launched, and
// everything before each event its stream waited for. That is strictly stronger than comparing
// virtual times: a missing event wait is a race even when the timing happened to work out, which is
// exactly the bug that passes on one GPU and corrupts data on another. Every race it reports also
// overlaps, or could overlap, in virtual time, and the message gives both ops' times.
//
// Blocks keep their access history across free and re-allocation, so "freed and reused while another
// stream still reads it" is caught the same way, whichever stream the block is reused for.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/runtime/device.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/event.hpp"

namespace fsdplab {

// Who makes an access: an op on a stream, or the host.
struct Accessor {
  OpId op = 0;  // 0 for the host
  std::string name;
  Lane lane = Lane::compute;
  std::uint64_t seq = 0;  // its own entry of its lane's vector clock
  SimTime begin = 0;
  SimTime end = 0;
};

struct RaceReport {
  std::string message;
  int rank = 0;
  Accessor earlier;  // the access already made
  Accessor later;    // the access that is not ordered after it: it stopped here, before its op ran
  bool earlier_wrote = false;
  bool later_writes = false;
  BlockId block = 0;
  MemTag earlier_tag = MemTag::workspace;
  MemTag later_tag = MemTag::workspace;
  bool reused = false;  // the earlier access was to an earlier allocation: the block was freed and handed out again
};

class RaceError : public Error {
 public:
  explicit RaceError(RaceReport report) : Error(report.message), report_(std::move(report)) {}
  const RaceReport& report() const { return report_; }

 private:
  RaceReport report_;
};

class RaceDetector {
 public:
  enum class Policy { throw_error, record };
  void set_policy(Policy p) { policy_ = p; }

  // Checks an access against the block's history; on a race throws RaceError or records it.
  // Call for every access of an op before committing any (see commit).
  void check_access(int rank, const Block& block, const Access& access, bool write, const Accessor& who,
                    const VectorClock& clock);
  // Adds the access to the block's history.
  void commit(const Block& block, const Access& access, bool write, const Accessor& who);
  // Drops history every lane is already ordered after: no future access can race with it.
  void prune(BlockId block, const std::array<VectorClock, kLaneCount>& lane_clocks);
  // The freed block passes to another stream, which its allocator orders after `freed`, the clock of the free on
  // its old stream: history that happened before the free cannot race with its new use, and is dropped. What the
  // old stream never waited for stays. See [Note: a block that crosses streams], sim_device.cpp.
  void hand_over(BlockId block, const VectorClock& freed);

  const std::vector<RaceReport>& races() const { return races_; }

 private:
  struct Entry {
    Accessor who;
    std::int64_t offset;
    std::int64_t bytes;
    bool write;
    MemTag tag;
    std::uint64_t generation;
  };
  Policy policy_ = Policy::throw_error;
  std::unordered_map<BlockId, std::vector<Entry>> history_;
  std::vector<RaceReport> races_;
};

}  // namespace fsdplab
