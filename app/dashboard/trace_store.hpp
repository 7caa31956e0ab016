// trace_store.hpp — what the dashboard has seen of one or more runs, in the shapes its panels draw.
//
// Events arrive from live runs (drained from the ranks' EventQueues each frame) or from a file
// (`fsdplab view`). Each arrives once and is stored compactly, so a million of them fit in ~60 MB and
// a frame can walk them fast:
//   lanes   one per (source, rank, lane): items sorted by begin, with a running maximum of their ends
//           so the first item still visible at time t is one binary search away (first_visible)
//   memory  per (source, rank): each tag's live bytes and the total, as step functions of time
//   steps   per source: each completed step's time, and its compute and communication time on rank 0
// A source is one run (SYNC, ASYNC, an A/B run) or one replayed file; its lanes are drawn together.
// Only the UI thread touches a TraceStore.
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/runtime/race_detector.hpp"
#include "engine/trace/trace_event.hpp"
#include "engine/trace/trace_recorder.hpp"

namespace fsdplab::app {

// One event as the timeline keeps it. Strings are interned (TraceStore::text).
struct TimelineItem {
  SimTime begin = 0;
  SimTime end = 0;
  std::int64_t bytes = 0;
  OpId op = 0;
  std::uint32_t name = 0;        // interned
  std::uint32_t phase = 0;       // interned; 0 is ""
  std::uint32_t deps_begin = 0;  // [deps_begin, deps_end) in TraceStore::deps()
  std::uint32_t deps_end = 0;
  std::int32_t step = -1;
  std::int32_t unit = -1;
  OpCategory category = OpCategory::compute;
  RankLink link = RankLink::in_node;  // collectives: the rank's link they took (sim on nodes)

  SimTime duration() const { return end - begin; }
};

struct TimelineLane {
  int source = 0;
  int rank = 0;
  Lane lane = Lane::compute;
  std::vector<TimelineItem> items;  // by begin
  std::vector<SimTime> end_prefix;  // end_prefix[i] = max end of items[0..i]

  // Index of the first item whose end is after `t` (items before it are over by then).
  std::size_t first_visible(SimTime t) const;
  // Index of the first item that begins at or after `t`, found by galloping out from `hint` (a guess of it, any
  // index: 0 where there is none): O(log |answer - hint|) probes, all
  // near the hint, instead of O(log n) over the lane. The timeline's level of detail jumps a pixel's worth
  // of items at a time and guesses each jump from the last one, so its searches stay in a few cache lines.
  std::size_t first_beginning_at(SimTime t, std::size_t hint) const;
};

// A step function of time: value from `times[i]` until `times[i+1]`. Every sample is kept, several at one time
// included: the ledger stamps a change with the host's issue time, so a buffer freed before that clock moves on
// (a temporary) is a rise and a fall at one time. Keeping only the last would lose the rise, and with it the
// peak the memory chart draws; at(t) still reads the value after all of them.
struct TimeSeries {
  std::vector<SimTime> times;  // not decreasing
  std::vector<std::int64_t> values;
  // Each sample's place among every sample of its rank (1, 2, ...; RankMemory::add): at one time it says
  // which tags' samples came before a total's, so the chart can stack the tags as they were at its peak.
  std::vector<std::uint64_t> moments;

  void add(SimTime t, std::int64_t v, std::uint64_t moment);
  std::int64_t at(SimTime t) const;  // 0 before the first sample; after the last of several at t
  std::int64_t peak() const { return peak_; }
  SimTime peak_time() const { return peak_time_; }

 private:
  std::int64_t peak_ = 0;
  SimTime peak_time_ = 0;
};

struct RankMemory {
  std::array<TimeSeries, kMemTagCount> tags;
  TimeSeries total;
  std::uint64_t samples = 0;  // received so far: the last one's moment

  // One ledger change: the tag's new live bytes and the rank's new total, at the same moment in both series.
  void add(const CounterSample& sample);
};

// One completed step of a source, as the step-time panel plots it (rank 0's view, on the source's clock).
struct StepTime {
  int step = 0;
  SimTime begin = 0;
  SimTime end = 0;
  double loss = 0;
  double grad_norm = std::numeric_limits<double>::quiet_NaN();  // before clipping (--clip-grad-norm); NaN: none
  SimTime compute = 0;  // |union of compute| on rank 0 within the step
  SimTime comm = 0;     // rank 0's link busy time in the step (communication_time)
  // The overlap % of the step (OverlapMetrics): |comm ∩ compute| of |union of comm|, rank 0's.
  SimTime comm_hidden = 0;
  SimTime comm_span = 0;
  bool sync = false;    // the step ran SYNC (an A/B run alternates)

  SimTime duration() const { return end - begin; }
};

struct TraceSource {
  std::string label;  // "SYNC", "ASYNC", "A/B", or a file name
  int world = 0;      // ranks seen (or declared by the run)
  bool sync = false;  // every step of this source runs SYNC (A/B sources say so per step)
  bool wall_clock = false;  // times are a GPU's wall clock (a cuda run), not the sim device's virtual time
  std::vector<RankMemory> memory;  // by rank
  std::vector<StepTime> steps;
  SimTime last_time = 0;           // the latest end of anything seen
  // The run's last step where it is known (a run started here, a replayed trace; not a remote run), else -1.
  // FSDP's last step has no next step to gather the root for, so it runs shorter than those before it.
  int last_step = -1;
  // Why the run ended early (a live run's error); empty while it runs and once it ends as planned. The panels
  // say "failed" where a run that stopped would otherwise look like a slow one.
  std::string failure;
  // The stream race that failure is, where the sim device's race detector stopped the run: the timeline marks its
  // two accesses (see [Note: the race on the timeline] in timeline_panel.cpp).
  std::optional<RaceReport> race;
  // The memory of the device each rank ran on, where known (a sim run's device preset, a trace that records it;
  // 0 where not), and the device's name: the memory panel marks it, and names the ranks whose peak is past it.
  std::int64_t device_memory = 0;
  std::string device_name;
};

class TraceStore {
 public:
  // A new source; returns its id (0, 1, ...).
  int add_source(std::string label, int world, bool sync);
  // Source `id`'s times are wall-clock (a cuda run) rather than virtual (the sim device's, the default).
  void set_wall_clock(int id, bool wall_clock) { sources_.at(static_cast<std::size_t>(id)).wall_clock = wall_clock; }
  // Source `id`'s run ends with step `step` (TraceSource::last_step).
  void set_last_step(int id, int step) { sources_.at(static_cast<std::size_t>(id)).last_step = step; }
  // Source `id`'s ranks each ran on a device `name` of `memory` bytes (TraceSource::device_memory).
  void set_device(int id, std::string name, std::int64_t memory);
  // Source `id`'s run ended early with `error` (TraceSource::failure).
  void set_failure(int id, std::string error) { sources_.at(static_cast<std::size_t>(id)).failure = std::move(error); }
  // Source `id`'s run was stopped by `race` (TraceSource::race). The lanes of its two accesses are made, empty
  // where none of their ops came (the later access's op never ran, and may be its lane's first), so the timeline
  // has a row to mark each on; the source's and the store's last time take in both.
  void set_race(int id, RaceReport race);
  void add_event(int source, const TraceEvent& event);
  void add_counter(int source, const CounterSample& sample);
  // A whole recorded or replayed trace: every event, then every counter sample.
  void add_trace(int source, const TraceData& data);
  // A step reported done by the run: its compute and comm are read from the events stored so far. On the sim
  // device a rank's events of a step are all emitted before its step ends; on cuda, CUPTI's records come in
  // buffers, often steps later, so a rank-0 event of a step already reported marks it to be measured again
  // (remeasure_steps).
  void add_step(int source, int step, SimTime begin, SimTime end, double loss, double grad_norm, bool sync);
  // Measures again the steps whose events came after their report; call after adding a batch of events.
  void remeasure_steps();
  // Replayed traces have no step reports: steps are found from the events' step labels on rank 0.
  void derive_steps(int source);
  // Forgets source `id` and everything of it (a remote run that made room for newer ones); the sources
  // after it move down by one. Strings and dependencies only it used are freed too.
  void remove_source(int id);
  // Forgets everything (a restart with new settings).
  void clear();

  const std::vector<TraceSource>& sources() const { return sources_; }
  const TraceSource& source(int id) const { return sources_.at(static_cast<std::size_t>(id)); }
  // Lanes in display order: by source, then rank, then lane (compute, all_gather, reduce_scatter,
  // memcpy, host). Lanes appear as their first event arrives.
  const std::vector<TimelineLane>& lanes() const { return lanes_; }
  std::string_view text(std::uint32_t id) const { return strings_[id]; }
  const std::vector<OpRef>& deps() const { return deps_; }
  // Where op `op` of `rank` in `source` is stored: (index in lanes(), index in its items), or none (op 0,
  // which host markers carry, or an op not seen). A stream runs its ops in issue order, so a device
  // lane's op ids rise with begin and one binary search per lane of the rank finds it; lanes whose ids
  // do not (a replayed file) are then searched item by item.
  std::optional<std::pair<std::size_t, std::size_t>> find_op(int source, int rank, OpId op) const;
  std::size_t event_count() const { return event_count_; }
  SimTime first_time() const { return event_count_ ? first_time_ : 0; }
  SimTime last_time() const { return last_time_; }

 private:
  std::uint32_t intern(std::string_view s);
  TimelineLane& lane(int source, int rank, Lane lane);
  // Rank 0's compute and comm in step t, from the events stored (add_step).
  void measure(int source, StepTime& t) const;

  std::vector<TraceSource> sources_;
  std::vector<TimelineLane> lanes_;
  std::vector<std::string> strings_{""};
  std::unordered_map<std::string, std::uint32_t> string_ids_{{"", 0}};
  std::vector<OpRef> deps_;
  std::size_t event_count_ = 0;
  SimTime first_time_ = 0;
  SimTime last_time_ = 0;
  std::set<std::pair<int, int>> steps_to_remeasure_;  // (source, step) of events that came after the step's report
};

// What the store's times are, in `unit` ("ms", "s"): "virtual ms" (sim sources), "wall ms" (cuda sources), or both
// named ("ms: virtual for sim runs, wall for cuda runs").
std::string clock_kind(const TraceStore& store, std::string_view unit);

}  // namespace fsdplab::app
