// The dashboard's trace store: lanes in display order, the binary searches the timeline's level of
// detail relies on, memory as step functions, and step times read back from the stored events.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "app/dashboard/trace_store.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab::app {
namespace {

TraceEvent event(int rank, Lane lane, OpCategory category, int step, SimTime begin, SimTime end) {
  TraceEvent e;
  e.rank = rank;
  e.lane = lane;
  e.name = std::string(category_name(category));
  e.category = category;
  e.step = step;
  e.begin = begin;
  e.end = end;
  return e;
}

TEST(TraceStore, LanesSortBySourceRankAndLane) {
  TraceStore store;
  const int a = store.add_source("SYNC", 2, true);
  const int b = store.add_source("ASYNC", 2, false);
  store.add_event(b, event(0, Lane::compute, OpCategory::compute, 0, 0, 10));
  store.add_event(a, event(1, Lane::all_gather, OpCategory::all_gather, 0, 0, 10));
  store.add_event(a, event(1, Lane::compute, OpCategory::compute, 0, 0, 10));
  store.add_event(a, event(0, Lane::reduce_scatter, OpCategory::reduce_scatter, 0, 0, 10));
  ASSERT_EQ(store.lanes().size(), 4u);
  EXPECT_EQ(store.lanes()[0].source, a);
  EXPECT_EQ(store.lanes()[0].rank, 0);
  EXPECT_EQ(store.lanes()[1].lane, Lane::compute);
  EXPECT_EQ(store.lanes()[1].rank, 1);
  EXPECT_EQ(store.lanes()[2].lane, Lane::all_gather);
  EXPECT_EQ(store.lanes()[3].source, b);
  EXPECT_EQ(store.event_count(), 4u);
}

TEST(TraceStore, FirstVisibleUsesTheRunningMaximumOfEnds) {
  TraceStore store;
  const int s = store.add_source("file", 1, false);
  // A long host event that covers later short ones, then an out-of-order arrival.
  store.add_event(s, event(0, Lane::host, OpCategory::host, 0, 0, 100));
  store.add_event(s, event(0, Lane::host, OpCategory::host, 0, 10, 20));
  store.add_event(s, event(0, Lane::host, OpCategory::host, 0, 40, 50));
  store.add_event(s, event(0, Lane::host, OpCategory::host, 0, 30, 35));
  const TimelineLane& lane = store.lanes().at(0);
  ASSERT_EQ(lane.items.size(), 4u);
  EXPECT_EQ(lane.items[2].begin, 30);  // inserted in begin order
  EXPECT_EQ(lane.first_visible(60), 0u);  // the first event still runs at 60
  EXPECT_EQ(lane.first_visible(100), 4u);
  EXPECT_EQ(lane.first_beginning_at(31, 0), 3u);
}

TEST(TraceStore, MemoryIsAStepFunctionWithItsPeak) {
  TraceStore store;
  const int s = store.add_source("SYNC", 1, true);
  for (auto [t, v] : {std::pair<SimTime, std::int64_t>{0, 10}, {5, 30}, {5, 40}, {9, 20}}) {
    CounterSample c;
    c.rank = 0;
    c.time = t;
    c.tag = MemTag::param_full;
    c.tag_live = v;
    c.total_live = v + 1;
    store.add_counter(s, c);
  }
  const TimeSeries& full = store.source(s).memory.at(0).tags[static_cast<std::size_t>(MemTag::param_full)];
  EXPECT_EQ(full.times.size(), 4u);  // both samples at 5 are kept
  EXPECT_EQ(full.at(-1), 0);
  EXPECT_EQ(full.at(5), 40);  // the last of them: the value from 5 on
  EXPECT_EQ(full.at(7), 40);
  EXPECT_EQ(full.at(100), 20);
  EXPECT_EQ(full.peak(), 40);
  EXPECT_EQ(full.peak_time(), 5);
  EXPECT_EQ(store.source(s).memory.at(0).total.peak(), 41);
}

// An allocation freed at the host time it was made (the ledger's clock had not moved on): a rise and a fall at
// one time. Both are kept, in order, with the moments that order them against the rank's other tags; the
// value from then on is the fall's, and the peak is the rise's.
TEST(TraceStore, ARiseAndAFallAtOneTimeAreBothKept) {
  TraceStore store;
  const int s = store.add_source("ASYNC", 1, false);
  const auto add = [&](SimTime t, MemTag tag, std::int64_t tag_live, std::int64_t total_live) {
    CounterSample c;
    c.rank = 0;
    c.time = t;
    c.tag = tag;
    c.tag_live = tag_live;
    c.total_live = total_live;
    store.add_counter(s, c);
  };
  add(0, MemTag::param_shard, 100, 100);
  add(7, MemTag::activation, 900, 1000);
  add(7, MemTag::activation, 0, 100);
  const RankMemory& memory = store.source(s).memory.at(0);
  const TimeSeries& act = memory.tags[static_cast<std::size_t>(MemTag::activation)];
  EXPECT_EQ(act.times, (std::vector<SimTime>{7, 7}));
  EXPECT_EQ(act.values, (std::vector<std::int64_t>{900, 0}));
  EXPECT_EQ(act.moments, (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(memory.total.values, (std::vector<std::int64_t>{100, 1000, 100}));
  EXPECT_EQ(memory.total.moments, (std::vector<std::uint64_t>{1, 2, 3}));
  EXPECT_EQ(act.at(7), 0);
  EXPECT_EQ(memory.total.at(7), 100);
  EXPECT_EQ(memory.total.peak(), 1000);
  EXPECT_EQ(memory.total.peak_time(), 7);
}

TEST(TraceStore, StepTimesReadComputeAndCommFromRankZero) {
  TraceStore store;
  const int s = store.add_source("ASYNC", 2, false);
  store.add_event(s, event(0, Lane::compute, OpCategory::compute, 0, 0, 50));
  store.add_event(s, event(0, Lane::compute, OpCategory::compute, 0, 60, 100));
  store.add_event(s, event(0, Lane::all_gather, OpCategory::all_gather, 0, 20, 70));
  store.add_event(s, event(1, Lane::all_gather, OpCategory::all_gather, 0, 0, 400));  // rank 1: not counted
  store.add_event(s, event(0, Lane::compute, OpCategory::compute, 1, 100, 130));      // the next step
  store.add_step(s, 0, 0, 100, 2.5, 1.25, false);
  ASSERT_EQ(store.source(s).steps.size(), 1u);
  const StepTime& t = store.source(s).steps[0];
  EXPECT_EQ(t.duration(), 100);
  EXPECT_EQ(t.compute, 90);
  EXPECT_EQ(t.comm, 50);
  EXPECT_DOUBLE_EQ(t.loss, 2.5);
  EXPECT_DOUBLE_EQ(t.grad_norm, 1.25);

  TraceStore replay;  // a replayed file: steps from the events' labels
  const int r = replay.add_source("trace.json", 2, false);
  replay.add_event(r, event(0, Lane::compute, OpCategory::compute, 0, 0, 50));
  replay.add_event(r, event(0, Lane::compute, OpCategory::compute, 1, 60, 90));
  replay.derive_steps(r);
  ASSERT_EQ(replay.source(r).steps.size(), 2u);
  EXPECT_EQ(replay.source(r).steps[1].begin, 60);
  EXPECT_EQ(replay.source(r).steps[1].compute, 30);
}

// On nodes (sim, --ranks-per-node), a rank's collectives take two links at once; its comm is the busier
// link's time, as `bench --what overlap` counts it, not their sum (which put eta above 1 on hybrid runs).
TEST(TraceStore, StepCommIsTheBusierOfARanksTwoLinks) {
  TraceStore store;
  const int s = store.add_source("ASYNC", 4, false);
  TraceEvent within = event(0, Lane::all_gather, OpCategory::all_gather, 0, 0, 60);
  TraceEvent between = event(0, Lane::reduce_scatter, OpCategory::reduce_scatter, 0, 10, 50);
  between.link = RankLink::between_nodes;
  store.add_event(s, within);
  store.add_event(s, between);
  store.add_step(s, 0, 0, 100, 2.5, 1.25, false);
  EXPECT_EQ(store.source(s).steps[0].comm, 60);
}

// On cuda, CUPTI's records come in buffers, often steps after the step was reported: the step is measured
// again once they are stored.
TEST(TraceStore, AStepsEventsThatComeAfterItsReportAreMeasuredAgain) {
  TraceStore store;
  const int s = store.add_source("ASYNC", 1, false);
  store.add_event(s, event(0, Lane::compute, OpCategory::compute, 0, 0, 10));
  store.add_step(s, 0, 0, 100, 2.5, 1.25, false);
  EXPECT_EQ(store.source(s).steps[0].compute, 10);
  store.add_event(s, event(0, Lane::compute, OpCategory::compute, 0, 20, 90));
  store.add_event(s, event(0, Lane::all_gather, OpCategory::all_gather, 0, 30, 60));
  store.add_event(s, event(0, Lane::compute, OpCategory::compute, 1, 100, 130));  // a step not reported yet
  EXPECT_EQ(store.source(s).steps[0].compute, 10) << "until the batch is measured";
  store.remeasure_steps();
  ASSERT_EQ(store.source(s).steps.size(), 1u);
  EXPECT_EQ(store.source(s).steps[0].compute, 80);
  EXPECT_EQ(store.source(s).steps[0].comm, 30);
  EXPECT_DOUBLE_EQ(store.source(s).steps[0].loss, 2.5);
}

TEST(TraceStore, FirstBeginningAtFromAHintAgreesWithTheBinarySearch) {
  TraceStore store;
  const int s = store.add_source("x", 1, false);
  // Begins with repeats and gaps: 0, 0, 3, 3, 3, 7, 8, 8, ...
  std::vector<SimTime> begins;
  for (int k = 0; k < 300; ++k) begins.push_back(k / 3 * 5 + (k % 7 == 0 ? 2 : 0) * (k % 3 == 0 ? 1 : 0));
  std::sort(begins.begin(), begins.end());
  for (SimTime b : begins) store.add_event(s, event(0, Lane::compute, OpCategory::compute, 0, b, b + 1));
  const TimelineLane& lane = store.lanes().at(0);
  for (SimTime t = -3; t < 520; ++t) {
    const auto expected = static_cast<std::size_t>(std::lower_bound(begins.begin(), begins.end(), t) -
                                                   begins.begin());  // computed here, not by the store
    for (std::size_t hint : {std::size_t{0}, std::size_t{1}, expected, expected + 1, expected / 2, expected * 2 + 5,
                             std::size_t{299}, std::size_t{300}, std::size_t{100'000}}) {
      ASSERT_EQ(lane.first_beginning_at(t, hint), expected) << "t " << t << " hint " << hint;
    }
  }
}

TEST(TraceStore, FindsAnOpByRankAndId) {
  TraceStore store;
  const int a = store.add_source("SYNC", 2, true);
  const int b = store.add_source("ASYNC", 2, false);
  const auto add = [&](int source, int rank, Lane lane, SimTime begin, OpId op, const char* name) {
    TraceEvent e = event(rank, lane, OpCategory::compute, 0, begin, begin + 5);
    e.op = op;
    e.name = name;
    store.add_event(source, e);
  };
  // Rank 0 of SYNC: ops 1..40 over two streams, ids rising with begin on each (as a stream runs them).
  for (OpId op = 1; op <= 40; ++op)
    add(a, 0, op % 3 == 0 ? Lane::all_gather : Lane::compute, static_cast<SimTime>(op) * 10, op,
        op % 3 == 0 ? "gather" : "matmul");
  add(a, 1, Lane::compute, 0, 7, "rank1");    // the same id on another rank
  add(b, 0, Lane::compute, 0, 7, "async");    // and in another source
  // A host lane whose ids do not follow begin (a replayed file): found item by item.
  add(a, 0, Lane::host, 0, 500, "late");
  add(a, 0, Lane::host, 10, 100, "early");
  add(a, 0, Lane::host, 20, 300, "middle");

  const auto name_of = [&](int source, int rank, OpId op) -> std::string {
    const auto found = store.find_op(source, rank, op);
    if (!found) return "-";
    const TimelineLane& lane = store.lanes().at(found->first);
    EXPECT_EQ(lane.source, source);
    EXPECT_EQ(lane.rank, rank);
    EXPECT_EQ(lane.items.at(found->second).op, op);
    return std::string(store.text(lane.items[found->second].name));
  };
  EXPECT_EQ(name_of(a, 0, 7), "matmul");
  EXPECT_EQ(name_of(a, 0, 9), "gather");
  EXPECT_EQ(name_of(a, 0, 40), "matmul");
  EXPECT_EQ(name_of(a, 1, 7), "rank1");
  EXPECT_EQ(name_of(b, 0, 7), "async");
  EXPECT_EQ(name_of(a, 0, 300), "middle");
  EXPECT_EQ(name_of(a, 0, 500), "late");
  EXPECT_EQ(name_of(a, 0, 41), "-");
  EXPECT_EQ(name_of(a, 0, 0), "-");  // host markers carry op 0: never a dependency
  EXPECT_EQ(name_of(b, 1, 7), "-");  // no such rank's lanes
  EXPECT_EQ(name_of(a, 0, 6), "gather");
}

TEST(TraceStore, RefusesEventsThatEndBeforeTheyBegin) {
  TraceStore store;
  const int s = store.add_source("x", 1, false);
  EXPECT_THROW(store.add_event(s, event(0, Lane::compute, OpCategory::compute, 0, 10, 5)), Error);
  EXPECT_THROW(store.add_event(7, event(0, Lane::compute, OpCategory::compute, 0, 0, 5)), Error);
}

}  // namespace
}  // namespace fsdplab::app
