// trace_metrics.hpp — how well a rank hid its communication, with Holistic Trace Analysis's definitions.
//
// HTA (hta/analyzers/communication_analysis.py, breakdown_analysis.py) merges the device intervals of
// each kind into a union and measures on the unions, so two overlapping kernels count once:
//   comm      |union of communication events|        (all_gather, reduce_scatter, all_reduce, broadcast)
//   compute   |union of compute events|, any stream   (copies are neither, as HTA's memory kernels)
//   overlap % = |comm ∩ compute| / |comm| * 100
//   exposed communication = |comm| - |comm ∩ compute|: the communication nothing hid
//   idle = span - |union of all device work|, span = first begin to last end of device work.
// Device work is every event on a stream lane; host events take no device time and are left out.
// All times are integer nanoseconds, so the results are exact. HTA itself first rounds a trace's
// float microseconds to whole ones (start up, end down), so on sub-microsecond detail its numbers for
// our exported files come out slightly different; with whole-microsecond times they are the same.
#pragma once
#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "engine/trace/trace_event.hpp"

namespace fsdplab {

struct TimeInterval {
  SimTime begin = 0;
  SimTime end = 0;
  friend bool operator==(const TimeInterval&, const TimeInterval&) = default;
};

// Sorted, disjoint intervals covering the same time as `intervals`; empty ones are dropped. O(n log n).
std::vector<TimeInterval> merge_intervals(std::vector<TimeInterval> intervals);
// Total length of merged intervals.
SimTime covered(std::span<const TimeInterval> merged);
// Length of the intersection of two merged lists. O(n + m).
SimTime intersection(std::span<const TimeInterval> a, std::span<const TimeInterval> b);

struct OverlapMetrics {
  int rank = 0;
  int step = -1;       // -1: the whole trace
  SimTime span = 0;    // first begin to last end of device work
  SimTime busy = 0;    // |union of device work|
  SimTime compute = 0;
  SimTime comm = 0;
  SimTime overlap = 0; // |comm ∩ compute|

  SimTime exposed_comm() const { return comm - overlap; }
  SimTime idle() const { return span - busy; }
  // With no communication there is nothing to hide: reported as 0 (HTA divides by zero there).
  double overlap_percent() const {
    return comm > 0 ? 100.0 * static_cast<double>(overlap) / static_cast<double>(comm) : 0.0;
  }
};

// One entry per rank that has events, in rank order. An Error for an event that ends before it begins.
std::vector<OverlapMetrics> metrics_per_rank(std::span<const TraceEvent> events);
// One entry per (rank, step) with step >= 0, in rank then step order: each step's events alone.
std::vector<OverlapMetrics> metrics_per_step(std::span<const TraceEvent> events);

// A collective and the part of its time that no compute covered: one term of the exposed communication.
struct ExposedCollective {
  std::size_t event = 0;  // its index in the events given
  SimTime exposed = 0;
};
// The collectives among `step_events` (one rank's events of one step) that compute did not cover whole, in the
// events' order, each with the time of it left uncovered: where a step's exposed communication lies. Where the
// collectives take one link in turn, their exposed times add up to |comm| - |comm ∩ compute|.
std::vector<ExposedCollective> exposed_collectives(std::span<const TraceEvent> step_events);

// One part of a step's exposed communication: the collectives of one name and phase in a step, how long they ran and
// how much of that no compute covered, each the mean over the steps read (a step without the part counts 0), and
// where the first of them began, from the rank's first event of the step (the mean over the steps it was exposed in).
struct ExposedPart {
  std::string name;
  std::string phase;
  SimTime at = 0;
  SimTime length = 0;
  SimTime exposed = 0;
};
struct ExposedCommunication {
  SimTime total = 0;  // the union of the collectives less the compute they overlap, the mean a step (HTA's exposed)
  std::vector<ExposedPart> largest;  // the parts exposed most (of parts exposed alike, the earliest), in time order
};
// `rank`'s events of each step in `steps`, measured with exposed_collectives and grouped into parts. Keeps the
// `largest` parts exposed most.
ExposedCommunication exposed_communication(std::span<const TraceEvent> events, int rank, std::span<const int> steps,
                                           std::size_t largest = 6);

// Each of `rank`'s links' busy time in `step` (-1: every step): the summed durations of its communication
// events on that link (TraceEvent::link), host lane left out, indexed by RankLink.
std::array<SimTime, kRankLinkCount> link_busy_times(std::span<const TraceEvent> events, int rank, int step = -1);
// The busiest link's time of link_busy_times: what no schedule can hide a step below. Unlike |comm| it counts two
// overlapping collectives on one link twice: it is the link's busy time where collectives take their link one
// at a time (the sim device's model), and then equals |comm| on one node, where every collective takes one link.
// On several nodes a rank's link within its node and its link between nodes carry a collective each at once.
SimTime communication_time(std::span<const TraceEvent> events, int rank, int step = -1);

// The largest total of `tags`' live bytes on `rank` at any moment in [begin, end], counting what was
// live when the window opened: e.g. the gathered parameters and gradients (param_full + grad_full) of
// one step, where the ledger's own peaks are per tag and over the whole run. Reads the counter samples
// in the order they were emitted (a rank's samples are in time order).
std::int64_t peak_live_bytes(std::span<const CounterSample> counters, int rank, std::span<const MemTag> tags,
                             SimTime begin, SimTime end);

}  // namespace fsdplab
