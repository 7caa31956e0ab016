// trace_metrics.cpp — interval unions and the HTA overlap metrics built on them.
#include "engine/trace/trace_metrics.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "engine/runtime/error.hpp"

namespace fsdplab {
std::vector<TimeInterval> merge_intervals(std::vector<TimeInterval> intervals) {
  std::erase_if(intervals, [](const TimeInterval& i) { return i.end <= i.begin; });
  std::sort(intervals.begin(), intervals.end(),
            [](const TimeInterval& a, const TimeInterval& b) { return a.begin < b.begin; });
  std::vector<TimeInterval> merged;
  for (const TimeInterval& i : intervals) {
    // Touching intervals merge too: [0, 5) and [5, 9) cover [0, 9) either way, and fewer is faster.
    if (!merged.empty() && i.begin <= merged.back().end) merged.back().end = std::max(merged.back().end, i.end);
    else merged.push_back(i);
  }
  return merged;
}

SimTime covered(std::span<const TimeInterval> merged) {
  SimTime total = 0;
  for (const TimeInterval& i : merged) total += i.end - i.begin;
  return total;
}

SimTime intersection(std::span<const TimeInterval> a, std::span<const TimeInterval> b) {
  SimTime total = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const SimTime lo = std::max(a[i].begin, b[j].begin);
    const SimTime hi = std::min(a[i].end, b[j].end);
    if (lo < hi) total += hi - lo;
    // Whichever ends first cannot meet anything further in the other list.
    if (a[i].end < b[j].end) ++i;
    else ++j;
  }
  return total;
}

namespace {

// An event that ends before it begins is a broken trace (a replayed file's), named rather than measured.
void check_ordered(const TraceEvent& e) {
  check(e.end >= e.begin, "trace metrics: event '", e.name, "' on rank ", e.rank, " ends at ", e.end,
        " ns, before it begins at ", e.begin, " ns");
}

// The events of one rank (and step) sorted into the three interval sets the metrics need.
struct Intervals {
  std::vector<TimeInterval> device, compute, comm;
};

OverlapMetrics measure(int rank, int step, const Intervals& in) {
  OverlapMetrics m;
  m.rank = rank;
  m.step = step;
  if (in.device.empty()) return m;
  SimTime first = in.device.front().begin, last = in.device.front().end;
  for (const TimeInterval& i : in.device) {
    first = std::min(first, i.begin);
    last = std::max(last, i.end);
  }
  m.span = last - first;
  const std::vector<TimeInterval> compute = merge_intervals(in.compute);
  const std::vector<TimeInterval> comm = merge_intervals(in.comm);
  m.busy = covered(merge_intervals(in.device));
  m.compute = covered(compute);
  m.comm = covered(comm);
  m.overlap = intersection(comm, compute);
  return m;
}

// Groups device events by `key` (rank, or rank and step) and measures each group, in key order.
template <class KeyOf>
std::vector<OverlapMetrics> measure_groups(std::span<const TraceEvent> events, KeyOf key_of) {
  std::map<std::pair<int, int>, Intervals> groups;
  for (const TraceEvent& e : events) {
    check_ordered(e);
    const std::optional<std::pair<int, int>> key = key_of(e);
    if (!key) continue;
    Intervals& g = groups[*key];
    if (e.lane == Lane::host) continue;  // the rank still gets an entry, with no device time
    const TimeInterval i{e.begin, e.end};
    g.device.push_back(i);
    if (e.category == OpCategory::compute) g.compute.push_back(i);
    if (is_communication(e.category)) g.comm.push_back(i);
  }
  std::vector<OverlapMetrics> out;
  out.reserve(groups.size());
  for (const auto& [key, intervals] : groups) out.push_back(measure(key.first, key.second, intervals));
  return out;
}

}  // namespace

std::vector<OverlapMetrics> metrics_per_rank(std::span<const TraceEvent> events) {
  return measure_groups(events, [](const TraceEvent& e) { return std::optional(std::pair(e.rank, -1)); });
}

std::vector<ExposedCollective> exposed_collectives(std::span<const TraceEvent> step_events) {
  std::vector<TimeInterval> compute;
  for (const TraceEvent& e : step_events)
    if (e.category == OpCategory::compute) compute.push_back({e.begin, e.end});
  compute = merge_intervals(std::move(compute));
  std::vector<ExposedCollective> out;
  for (std::size_t i = 0; i < step_events.size(); ++i) {
    const TraceEvent& e = step_events[i];
    if (!is_communication(e.category)) continue;
    const std::array<TimeInterval, 1> self = {TimeInterval{e.begin, e.end}};
    const SimTime exposed = e.end - e.begin - intersection(self, compute);
    if (exposed > 0) out.push_back({i, exposed});
  }
  return out;
}

ExposedCommunication exposed_communication(std::span<const TraceEvent> events, int rank, std::span<const int> steps,
                                           std::size_t largest) {
  // Summed over the steps, keyed by (name, phase): "at" over the `steps_seen` steps the part was exposed in, and
  // "first", its earliest start, for the order the parts ran in.
  struct Sums {
    SimTime at = 0, length = 0, exposed = 0;
    int steps_seen = 0;
    SimTime first = std::numeric_limits<SimTime>::max();
  };
  std::map<std::pair<std::string, std::string>, Sums> parts;
  ExposedCommunication out;
  for (int step : steps) {
    std::vector<TraceEvent> of_step;
    for (const TraceEvent& e : events)
      if (e.rank == rank && e.step == step) of_step.push_back(e);
    if (of_step.empty()) continue;
    SimTime start = of_step.front().begin;
    std::vector<TimeInterval> comm, compute;
    for (const TraceEvent& e : of_step) {
      start = std::min(start, e.begin);
      if (e.lane == Lane::host) continue;
      if (e.category == OpCategory::compute) compute.push_back({e.begin, e.end});
      if (is_communication(e.category)) comm.push_back({e.begin, e.end});
    }
    // The step's exposed time is |comm| - |comm ∩ compute| (HTA's, as bench's headline has it): two collectives
    // exposed at once, on a rank's two links, count that time once, so the parts may add up to more.
    comm = merge_intervals(std::move(comm));
    out.total += covered(comm) - intersection(comm, merge_intervals(std::move(compute)));
    std::map<std::pair<std::string, std::string>, SimTime> first_in_step;
    for (const ExposedCollective& c : exposed_collectives(of_step)) {
      const TraceEvent& e = of_step[c.event];
      Sums& sums = parts[{e.name, e.phase}];
      auto [first, inserted] = first_in_step.try_emplace({e.name, e.phase}, e.begin - start);
      if (inserted) {
        sums.at += first->second;
        ++sums.steps_seen;
      }
      sums.first = std::min(sums.first, e.begin - start);
      sums.length += e.end - e.begin;
      sums.exposed += c.exposed;
    }
  }
  const SimTime n = static_cast<SimTime>(std::max<std::size_t>(steps.size(), 1));
  out.total /= n;
  std::vector<std::pair<SimTime, ExposedPart>> ranked;  // (first seen, part)
  for (const auto& [key, sums] : parts)
    ranked.push_back(
        {sums.first, {key.first, key.second, sums.at / sums.steps_seen, sums.length / n, sums.exposed / n}});
  // In the order they ran, so that of parts exposed alike the earliest is kept.
  const auto by_first = [](const auto& a, const auto& b) { return a.first < b.first; };
  std::sort(ranked.begin(), ranked.end(), by_first);
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.second.exposed > b.second.exposed; });
  if (ranked.size() > largest) ranked.resize(largest);
  std::sort(ranked.begin(), ranked.end(), by_first);
  for (auto& [first, part] : ranked) out.largest.push_back(std::move(part));
  return out;
}

std::vector<OverlapMetrics> metrics_per_step(std::span<const TraceEvent> events) {
  return measure_groups(events, [](const TraceEvent& e) {
    return e.step >= 0 ? std::optional(std::pair(e.rank, e.step)) : std::nullopt;
  });
}

std::array<SimTime, kRankLinkCount> link_busy_times(std::span<const TraceEvent> events, int rank, int step) {
  std::array<SimTime, kRankLinkCount> busy{};
  for (const TraceEvent& e : events) {
    if (e.rank != rank || e.lane == Lane::host || !is_communication(e.category)) continue;
    if (step >= 0 && e.step != step) continue;
    check_ordered(e);
    busy[static_cast<std::size_t>(e.link)] += e.end - e.begin;
  }
  return busy;
}

SimTime communication_time(std::span<const TraceEvent> events, int rank, int step) {
  const std::array<SimTime, kRankLinkCount> busy = link_busy_times(events, rank, step);
  return *std::max_element(busy.begin(), busy.end());
}

std::int64_t peak_live_bytes(std::span<const CounterSample> counters, int rank, std::span<const MemTag> tags,
                             SimTime begin, SimTime end) {
  std::array<std::int64_t, kMemTagCount> live{};
  const auto total = [&] {
    std::int64_t sum = 0;
    for (MemTag tag : tags) sum += live[static_cast<std::size_t>(tag)];
    return sum;
  };
  std::int64_t peak = 0;
  bool opened = false;
  for (const CounterSample& c : counters) {
    if (c.rank != rank) continue;
    if (c.time > end) break;
    if (!opened && c.time >= begin) {
      peak = total();  // what was live when the window opened
      opened = true;
    }
    live[static_cast<std::size_t>(c.tag)] = c.tag_live;
    if (opened) peak = std::max(peak, total());
  }
  return opened ? peak : total();
}

}  // namespace fsdplab
