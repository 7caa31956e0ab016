#include "app/dashboard/trace_store.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "engine/runtime/error.hpp"
#include "engine/trace/trace_metrics.hpp"

namespace fsdplab::app {
namespace {

// A source has seen rank `rank` (an event, a memory sample, a race): its world and its memory reach that far.
void take_rank(TraceSource& src, int rank) {
  if (rank < src.world) return;
  src.world = rank + 1;
  src.memory.resize(static_cast<std::size_t>(src.world));
}

}  // namespace

// ---- lanes -----------------------------------------------------------------------------------------

std::size_t TimelineLane::first_visible(SimTime t) const {
  return static_cast<std::size_t>(std::upper_bound(end_prefix.begin(), end_prefix.end(), t) - end_prefix.begin());
}

std::size_t TimelineLane::first_beginning_at(SimTime t, std::size_t hint) const {
  const std::size_t n = items.size();
  hint = std::min(hint, n);
  // Find a bracket [lo, hi] with items[lo - 1] beginning before t (or lo == 0) and items[hi] at or after
  // t (or hi == n), doubling the step away from the hint, then binary search inside it.
  std::size_t lo = hint, hi = hint;
  if (hint < n && items[hint].begin < t) {  // the answer is after the hint
    std::size_t step = 1;
    lo = hint + 1;
    hi = hint + 1;
    while (hi < n && items[hi].begin < t) {
      lo = hi + 1;
      hi = std::min(n, hint + (step *= 2));
    }
  } else {  // at or before the hint
    std::size_t step = 1;
    while (lo > 0 && items[lo - 1].begin >= t) {
      hi = lo - 1;
      lo = hint >= (step *= 2) ? hint - step : 0;
    }
  }
  return static_cast<std::size_t>(std::lower_bound(items.begin() + static_cast<std::ptrdiff_t>(lo),
                                                   items.begin() + static_cast<std::ptrdiff_t>(hi), t,
                                                   [](const TimelineItem& i, SimTime v) { return i.begin < v; }) -
                                  items.begin());
}

// ---- time series -----------------------------------------------------------------------------------

void TimeSeries::add(SimTime t, std::int64_t v, std::uint64_t moment) {
  times.push_back(t);
  values.push_back(v);
  moments.push_back(moment);
  if (v > peak_) {
    peak_ = v;
    peak_time_ = t;
  }
}

std::int64_t TimeSeries::at(SimTime t) const {
  const auto after = std::upper_bound(times.begin(), times.end(), t);
  if (after == times.begin()) return 0;
  return values[static_cast<std::size_t>(after - times.begin() - 1)];
}

void RankMemory::add(const CounterSample& sample) {
  ++samples;
  tags[static_cast<std::size_t>(sample.tag)].add(sample.time, sample.tag_live, samples);
  total.add(sample.time, sample.total_live, samples);
}

// ---- the store -------------------------------------------------------------------------------------

int TraceStore::add_source(std::string label, int world, bool sync) {
  TraceSource s;
  s.label = std::move(label);
  s.world = world;
  s.sync = sync;
  s.memory.resize(static_cast<std::size_t>(std::max(world, 0)));
  sources_.push_back(std::move(s));
  return static_cast<int>(sources_.size()) - 1;
}

void TraceStore::clear() { *this = TraceStore(); }

void TraceStore::set_device(int id, std::string name, std::int64_t memory) {
  check(memory >= 0, "TraceStore: source ", id, "'s device memory of ", memory, " bytes; expected >= 0 (0: unknown)");
  TraceSource& source = sources_.at(static_cast<std::size_t>(id));
  source.device_name = std::move(name);
  source.device_memory = memory;
}

void TraceStore::set_race(int id, RaceReport race) {
  check(id >= 0 && static_cast<std::size_t>(id) < sources_.size(), "trace store: source ", id, " of ", sources_.size());
  check(race.rank >= 0, "trace store: a race on rank ", race.rank, "; expected >= 0");
  lane(id, race.rank, race.earlier.lane);
  lane(id, race.rank, race.later.lane);
  TraceSource& src = sources_[static_cast<std::size_t>(id)];
  take_rank(src, race.rank);
  src.last_time = std::max({src.last_time, race.earlier.end, race.later.end});
  last_time_ = std::max(last_time_, src.last_time);
  src.race = std::move(race);
}

void TraceStore::remove_source(int id) {
  check(id >= 0 && static_cast<std::size_t>(id) < sources_.size(), "trace store: source ", id, " of ", sources_.size());
  remeasure_steps();  // the pending source ids are the old ones
  sources_.erase(sources_.begin() + id);
  std::erase_if(lanes_, [&](const TimelineLane& l) { return l.source == id; });
  // What is left is rebuilt: its strings and dependencies into fresh tables (else a dashboard that
  // forgets runs one after another would keep every name it ever saw), the counts and extents.
  std::vector<std::string> old_strings = std::move(strings_);
  std::vector<OpRef> old_deps = std::move(deps_);
  strings_ = {""};
  string_ids_ = {{"", 0}};
  deps_.clear();
  event_count_ = 0;
  first_time_ = 0;
  last_time_ = 0;
  for (TimelineLane& l : lanes_) {
    if (l.source > id) --l.source;
    for (TimelineItem& item : l.items) {
      item.name = intern(old_strings[item.name]);
      item.phase = intern(old_strings[item.phase]);
      const auto deps_begin = static_cast<std::uint32_t>(deps_.size());
      deps_.insert(deps_.end(), old_deps.begin() + item.deps_begin, old_deps.begin() + item.deps_end);
      item.deps_begin = deps_begin;
      item.deps_end = static_cast<std::uint32_t>(deps_.size());
    }
    if (!l.items.empty()) {
      first_time_ = event_count_ == 0 ? l.items.front().begin : std::min(first_time_, l.items.front().begin);
      last_time_ = std::max(last_time_, l.end_prefix.back());
    }
    event_count_ += l.items.size();
  }
  for (const TraceSource& s : sources_) last_time_ = std::max(last_time_, s.last_time);
}

std::uint32_t TraceStore::intern(std::string_view s) {
  const auto found = string_ids_.find(std::string(s));
  if (found != string_ids_.end()) return found->second;
  const auto id = static_cast<std::uint32_t>(strings_.size());
  strings_.emplace_back(s);
  string_ids_.emplace(strings_.back(), id);
  return id;
}

TimelineLane& TraceStore::lane(int source, int rank, Lane lane) {
  const auto key = [](const TimelineLane& l) { return std::tuple(l.source, l.rank, lane_index(l.lane)); };
  const auto wanted = std::tuple(source, rank, lane_index(lane));
  const auto at = std::lower_bound(lanes_.begin(), lanes_.end(), wanted,
                                   [&](const TimelineLane& l, const auto& w) { return key(l) < w; });
  if (at != lanes_.end() && key(*at) == wanted) return *at;
  TimelineLane fresh;
  fresh.source = source;
  fresh.rank = rank;
  fresh.lane = lane;
  return *lanes_.insert(at, std::move(fresh));
}

void TraceStore::add_event(int source, const TraceEvent& event) {
  check(source >= 0 && static_cast<std::size_t>(source) < sources_.size(), "trace store: source ", source,
        " of ", sources_.size());
  check(event.rank >= 0, "trace store: event '", event.name, "' has rank ", event.rank, "; expected >= 0");
  check(event.end >= event.begin, "trace store: event '", event.name, "' ends at ", event.end,
        " ns before it begins at ", event.begin, " ns");
  TraceSource& src = sources_[static_cast<std::size_t>(source)];
  take_rank(src, event.rank);
  TimelineItem item;
  item.begin = event.begin;
  item.end = event.end;
  item.bytes = event.bytes;
  item.op = event.op;
  item.name = intern(event.name);
  item.phase = intern(event.phase);
  item.deps_begin = static_cast<std::uint32_t>(deps_.size());
  deps_.insert(deps_.end(), event.deps.begin(), event.deps.end());
  item.deps_end = static_cast<std::uint32_t>(deps_.size());
  item.step = event.step;
  item.unit = event.unit;
  item.category = event.category;
  item.link = event.link;

  if (event.rank == 0 && event.step >= 0 && !src.steps.empty() && event.step <= src.steps.back().step)
    steps_to_remeasure_.emplace(source, event.step);  // CUPTI's records come steps late (add_step)
  TimelineLane& l = lane(source, event.rank, event.lane);
  if (l.items.empty() || l.items.back().begin <= item.begin) {
    l.end_prefix.push_back(l.items.empty() ? item.end : std::max(l.end_prefix.back(), item.end));
    l.items.push_back(item);
  } else {  // out of order (a file not sorted by time): insert, and redo the running maximum after it
    const auto at = std::upper_bound(l.items.begin(), l.items.end(), item.begin,
                                     [](SimTime v, const TimelineItem& i) { return v < i.begin; });
    const auto from = static_cast<std::size_t>(at - l.items.begin());
    l.items.insert(at, item);
    l.end_prefix.resize(l.items.size());
    for (std::size_t i = from; i < l.items.size(); ++i)
      l.end_prefix[i] = i == 0 ? l.items[i].end : std::max(l.end_prefix[i - 1], l.items[i].end);
  }
  first_time_ = event_count_ == 0 ? event.begin : std::min(first_time_, event.begin);
  ++event_count_;
  last_time_ = std::max(last_time_, event.end);
  src.last_time = std::max(src.last_time, event.end);
}

std::optional<std::pair<std::size_t, std::size_t>> TraceStore::find_op(int source, int rank, OpId op) const {
  if (op == 0) return std::nullopt;
  // The rank's lanes are next to each other in display order.
  const auto key = [](const TimelineLane& l) { return std::pair(l.source, l.rank); };
  const auto wanted = std::pair(source, rank);
  const auto first = std::lower_bound(lanes_.begin(), lanes_.end(), wanted,
                                      [&](const TimelineLane& l, const auto& w) { return key(l) < w; });
  const auto last = std::upper_bound(first, lanes_.end(), wanted,
                                     [&](const auto& w, const TimelineLane& l) { return w < key(l); });
  // A binary search by hand, not std::lower_bound: its precondition (items ordered by op) may not hold.
  for (auto l = first; l != last; ++l) {
    std::size_t lo = 0, hi = l->items.size();
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (l->items[mid].op < op) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo < l->items.size() && l->items[lo].op == op)
      return std::pair(static_cast<std::size_t>(l - lanes_.begin()), lo);
  }
  for (auto l = first; l != last; ++l)
    for (std::size_t i = 0; i < l->items.size(); ++i)
      if (l->items[i].op == op) return std::pair(static_cast<std::size_t>(l - lanes_.begin()), i);
  return std::nullopt;
}

void TraceStore::add_counter(int source, const CounterSample& sample) {
  check(source >= 0 && static_cast<std::size_t>(source) < sources_.size(), "trace store: source ", source,
        " of ", sources_.size());
  check(sample.rank >= 0, "trace store: memory sample of rank ", sample.rank, "; expected >= 0");
  TraceSource& src = sources_[static_cast<std::size_t>(source)];
  take_rank(src, sample.rank);
  src.memory[static_cast<std::size_t>(sample.rank)].add(sample);
  src.last_time = std::max(src.last_time, sample.time);
  last_time_ = std::max(last_time_, sample.time);
}

void TraceStore::add_trace(int source, const TraceData& data) {
  for (const TraceEvent& e : data.events) add_event(source, e);
  for (const CounterSample& c : data.counters) add_counter(source, c);
}

void TraceStore::add_step(int source, int step, SimTime begin, SimTime end, double loss, double grad_norm, bool sync) {
  TraceSource& src = sources_.at(static_cast<std::size_t>(source));
  StepTime t;
  t.step = step;
  t.begin = begin;
  t.end = end;
  t.loss = loss;
  t.grad_norm = grad_norm;
  t.sync = sync;
  measure(source, t);
  src.steps.push_back(t);
}

void TraceStore::remeasure_steps() {
  for (const auto& [source, step] : steps_to_remeasure_) {
    if (static_cast<std::size_t>(source) >= sources_.size()) continue;
    auto& steps = sources_[static_cast<std::size_t>(source)].steps;
    const auto t = std::find_if(steps.rbegin(), steps.rend(), [&](const StepTime& s) { return s.step == step; });
    if (t != steps.rend()) measure(source, *t);
  }
  steps_to_remeasure_.clear();
}

void TraceStore::measure(int source, StepTime& t) const {
  const int step = t.step;
  const SimTime begin = t.begin, end = t.end;
  // Rank 0's events of this step, back in the engine's own shape for the metrics' definitions.
  std::vector<TraceEvent> events;
  for (const TimelineLane& l : lanes_) {
    if (l.source != source || l.rank != 0) continue;
    for (std::size_t i = l.first_visible(begin); i < l.items.size() && l.items[i].begin < end; ++i) {
      const TimelineItem& item = l.items[i];
      if (item.step != step) continue;
      TraceEvent e;
      e.rank = 0;
      e.lane = l.lane;
      e.category = item.category;
      e.link = item.link;  // comm is the busier of the rank's links (communication_time), not their sum
      e.step = step;
      e.begin = item.begin;
      e.end = item.end;
      events.push_back(std::move(e));
    }
  }
  t.compute = t.comm_hidden = t.comm_span = 0;
  for (const OverlapMetrics& m : metrics_per_step(events))
    if (m.step == step) {
      t.compute = m.compute;
      t.comm_hidden = m.overlap;
      t.comm_span = m.comm;
    }
  t.comm = communication_time(events, 0, step);
}

void TraceStore::derive_steps(int source) {
  // By the steps that occur, not indexed by step number: a file's labels may be anything up to INT_MAX
  // (a resumed run starts late), and memory must follow what the file holds, not what it claims.
  std::map<int, std::pair<SimTime, SimTime>> spans;
  for (const TimelineLane& l : lanes_) {
    if (l.source != source || l.rank != 0) continue;
    for (const TimelineItem& item : l.items) {
      if (item.step < 0) continue;
      auto& [b, e] = spans.try_emplace(item.step, item.begin, item.end).first->second;
      b = std::min(b, item.begin);
      e = std::max(e, item.end);
    }
  }
  const bool sync = sources_.at(static_cast<std::size_t>(source)).sync;
  for (const auto& [step, span] : spans)
    add_step(source, step, span.first, span.second, 0, std::numeric_limits<double>::quiet_NaN(), sync);
}

std::string clock_kind(const TraceStore& store, std::string_view unit) {
  const auto& sources = store.sources();
  const bool any_wall = std::any_of(sources.begin(), sources.end(), [](const TraceSource& s) { return s.wall_clock; });
  const bool all_wall = !sources.empty() && std::all_of(sources.begin(), sources.end(),
                                                        [](const TraceSource& s) { return s.wall_clock; });
  const std::string in(unit);
  if (all_wall) return "wall " + in;
  return any_wall ? in + ": virtual for sim runs, wall for cuda runs" : "virtual " + in;
}

}  // namespace fsdplab::app
