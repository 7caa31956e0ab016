// rank_harness.hpp — W ranks for a check that calls a task's methods directly: each a thread with its own
// sim device (op graph kept, the race detector throwing) and its handle on the world's collectives, as
// train_fsdp sets a rank up, without a model. A check then asks precise questions a whole training
// cannot: which stream the gather went to, whether the host waited, what a slice holds at odd W.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/comm/local_comm.hpp"
#include "engine/runtime/sim_device.hpp"
#include "grader/grade_check.hpp"

namespace fsdplab::grading {

struct GradedRank {
  int rank = 0;
  int world = 1;
  SimDevice& device;
  LocalComm& comm;
};

// A sim device on the h100-sxm preset with the nvlink4 link, as the checks' trainings use; its race detector
// throws, unless `races` says to record them (a check of something else than the order, which a race must not stop).
std::unique_ptr<SimDevice> make_graded_device(int rank, bool dry_run = false,
                                              RaceDetector::Policy races = RaceDetector::Policy::throw_error);

// What each rank found (a pass when all is well): each rank writes only its own slot. The first failure
// is the check's outcome.
using RankFindings = std::vector<CheckOutcome>;
CheckOutcome first_failure(const RankFindings& found);

// The ops `device` launched from the `first`-th on (copies: launching more may move the log).
std::vector<OpRecord> ops_since(const Device& device, std::size_t first);
// The first of `ops` of `category`, or nullptr.
const OpRecord* first_of(const std::vector<OpRecord>& ops, OpCategory category);
// How many of `ops` are of `category`.
int count_of(const std::vector<OpRecord>& ops, OpCategory category);
// Work already issued on `lane` when the graded method runs: an op of `duration` that touches no memory, so a
// wrong order shows on the virtual clock, named, instead of stopping the check as a race. Its record.
OpRecord busy_op(Device& device, Lane lane, OpCategory category, std::string name, SimTime duration);
// Whether an event wait ordered `op` after the op `id` (OpRecord::deps: an event names the last op of the stream it was
// recorded on, and the next op launched on a stream that waited for it lists that op). Stream order lists nothing, and
// an op that merely started later is not "waited for": so a probe op issued on a stream after a graded call says
// exactly whether the call made that stream wait. A wait the caching allocator added (a block freed on another
// stream, WaitReason::freed_block) is not the program's, and is not counted.
bool waited_for(const OpRecord& op, OpId id);
// The streams of `issued` (work issued before a graded call, busy_op's records) whose work `op` waited for by an event:
// an event recorded on a stream carries that stream's last op, so this names the stream each event was recorded on.
std::set<Lane> lanes_waited_for(const OpRecord& op, const std::vector<OpRecord>& issued);
// Whether two ops ran at the same time on the virtual clock.
bool intersects(const OpRecord& a, const OpRecord& b);
// The ops of `ops` (one rank's, in issue order) the host issued once the device had run dry, after every op issued
// before them had ended, as after a host sync: those of step `step`, or of every step.
int issued_on_an_idle_device(const std::vector<OpRecord>& ops, std::optional<int> step = std::nullopt);

// Runs `body` on `world` ranks and joins them; the first rank's Error is rethrown (run_world). Nothing
// may be in flight when body returns: the harness synchronizes each device before its tensors go. `races` as
// make_graded_device's.
void on_ranks(int world, const std::function<void(GradedRank&)>& body,
              RaceDetector::Policy races = RaceDetector::Policy::throw_error);

}  // namespace fsdplab::grading
