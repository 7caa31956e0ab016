// Overlap metrics with HTA's definitions, on hand-built timelines whose answers are known.
#include <array>
#include <random>

#include "engine/runtime/error.hpp"
#include "engine/trace/trace_metrics.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

TraceEvent ev(Lane lane, OpCategory category, SimTime begin, SimTime end, int rank = 0, int step = -1) {
  TraceEvent e;
  e.rank = rank;
  e.lane = lane;
  e.category = category;
  e.name = std::string(category_name(category));
  e.begin = begin;
  e.end = end;
  e.step = step;
  return e;
}
TraceEvent compute(SimTime b, SimTime e, Lane lane = Lane::compute) { return ev(lane, OpCategory::compute, b, e); }
TraceEvent gather(SimTime b, SimTime e) { return ev(Lane::all_gather, OpCategory::all_gather, b, e); }

OverlapMetrics only_rank(const std::vector<TraceEvent>& events) {
  const std::vector<OverlapMetrics> m = metrics_per_rank(events);
  EXPECT_EQ(m.size(), 1u);
  return m.empty() ? OverlapMetrics{} : m[0];
}

TEST(TraceMetrics, MergeSortsJoinsAndDropsEmptyIntervals) {
  const std::vector<TimeInterval> merged =
      merge_intervals({{5, 10}, {0, 3}, {2, 4}, {6, 7}, {10, 12}, {20, 20}, {15, 14}, {30, 31}});
  EXPECT_EQ(merged, (std::vector<TimeInterval>{{0, 4}, {5, 12}, {30, 31}}));
  EXPECT_EQ(covered(merged), 4 + 7 + 1);
  EXPECT_TRUE(merge_intervals({}).empty());
}

TEST(TraceMetrics, IntersectionOfMergedLists) {
  const std::vector<TimeInterval> a = {{0, 10}, {20, 30}};
  EXPECT_EQ(intersection(a, std::vector<TimeInterval>{{5, 25}}), 10);
  EXPECT_EQ(intersection(a, std::vector<TimeInterval>{{10, 20}}), 0);  // touching is not overlapping
  EXPECT_EQ(intersection(a, a), 20);
  EXPECT_EQ(intersection(a, std::vector<TimeInterval>{{1, 2}, {3, 4}, {9, 21}, {29, 40}}), 1 + 1 + 1 + 1 + 1);
  EXPECT_EQ(intersection(a, {}), 0);
}

TEST(TraceMetrics, NoOverlapExposesAllCommunication) {
  const OverlapMetrics m = only_rank({compute(0, 10), gather(10, 15)});
  EXPECT_EQ(m.compute, 10);
  EXPECT_EQ(m.comm, 5);
  EXPECT_EQ(m.overlap, 0);
  EXPECT_EQ(m.exposed_comm(), 5);
  EXPECT_DOUBLE_EQ(m.overlap_percent(), 0.0);
  EXPECT_EQ(m.span, 15);
  EXPECT_EQ(m.idle(), 0);
}

TEST(TraceMetrics, FullOverlapHidesAllCommunication) {
  const OverlapMetrics m = only_rank({compute(0, 10), gather(2, 8)});
  EXPECT_EQ(m.comm, 6);
  EXPECT_EQ(m.overlap, 6);
  EXPECT_EQ(m.exposed_comm(), 0);
  EXPECT_DOUBLE_EQ(m.overlap_percent(), 100.0);
}

TEST(TraceMetrics, PartialOverlap) {
  const OverlapMetrics m = only_rank({compute(0, 10), gather(5, 15)});
  EXPECT_EQ(m.overlap, 5);
  EXPECT_EQ(m.exposed_comm(), 5);
  EXPECT_DOUBLE_EQ(m.overlap_percent(), 50.0);
  EXPECT_EQ(m.busy, 15);
}

// Each collective with the part of it no compute covered; one compute covered whole is not listed.
TEST(TraceMetrics, ExposedCollectivesAreTheUncoveredPartsOfEach) {
  const std::vector<TraceEvent> events = {compute(0, 10), gather(2, 8), compute(12, 20, Lane::memcpy), gather(5, 15),
                                          ev(Lane::reduce_scatter, OpCategory::reduce_scatter, 18, 30)};
  const std::vector<ExposedCollective> exposed = exposed_collectives(events);
  ASSERT_EQ(exposed.size(), 2u);
  EXPECT_EQ(exposed[0].event, 3u);  // [5, 15): [10, 12) uncovered
  EXPECT_EQ(exposed[0].exposed, 2);
  EXPECT_EQ(exposed[1].event, 4u);  // [18, 30): [20, 30)
  EXPECT_EQ(exposed[1].exposed, 10);
}

// Parts are a step's collectives of one name and phase; their figures are means over the steps, a step without the
// part counting 0, except where it began, the mean of the steps it was exposed in. Other ranks are not read.
TEST(TraceMetrics, ExposedCommunicationIsTheMeanOverTheStepsPartByPart) {
  const auto named = [](TraceEvent e, std::string name, std::string phase) {
    e.name = std::move(name);
    e.phase = std::move(phase);
    return e;
  };
  std::vector<TraceEvent> events = {
      ev(Lane::compute, OpCategory::compute, 0, 10, 0, 0),
      named(ev(Lane::all_gather, OpCategory::all_gather, 8, 14, 0, 0), "gather u1", "forward"),  // 4 exposed
      ev(Lane::compute, OpCategory::compute, 100, 110, 0, 1),
      named(ev(Lane::all_gather, OpCategory::all_gather, 108, 118, 0, 1), "gather u1", "forward"),       // 8 exposed
      named(ev(Lane::reduce_scatter, OpCategory::reduce_scatter, 120, 122, 0, 1), "rs u1", "backward"),  // 2
      named(ev(Lane::all_gather, OpCategory::all_gather, 0, 50, 1, 0), "gather u1", "forward"),          // rank 1
  };
  const std::vector<int> steps = {0, 1};
  const ExposedCommunication all = exposed_communication(events, 0, steps);
  EXPECT_EQ(all.total, (4 + 8 + 2) / 2);
  ASSERT_EQ(all.largest.size(), 2u);
  EXPECT_EQ(all.largest[0].name, "gather u1");
  EXPECT_EQ(all.largest[0].at, 8);       // 8 from each step's start
  EXPECT_EQ(all.largest[0].length, 8);   // (6 + 10) / 2
  EXPECT_EQ(all.largest[0].exposed, 6);  // (4 + 8) / 2
  EXPECT_EQ(all.largest[1].name, "rs u1");
  EXPECT_EQ(all.largest[1].phase, "backward");
  EXPECT_EQ(all.largest[1].at, 20);      // in step 1 alone
  EXPECT_EQ(all.largest[1].exposed, 1);  // 2 in one step of two
  const ExposedCommunication one = exposed_communication(events, 0, steps, 1);
  ASSERT_EQ(one.largest.size(), 1u);
  EXPECT_EQ(one.largest[0].name, "gather u1");
  EXPECT_EQ(one.total, all.total);
}

// Nested and overlapping events of one kind count once: that is what the union is for.
// Two collectives exposed at once (a rank's two links, within and between nodes) count that time once in the total,
// as in the union bench's headline reads; each part keeps its own exposed time.
TEST(TraceMetrics, ExposedCommunicationCountsSimultaneousCollectivesOnce) {
  const std::vector<TraceEvent> events = {
      ev(Lane::compute, OpCategory::compute, 0, 10, 0, 0),
      ev(Lane::all_gather, OpCategory::all_gather, 8, 14, 0, 0),       // 4 exposed: [10, 14)
      ev(Lane::reduce_scatter, OpCategory::all_reduce, 12, 16, 0, 0),  // 4 exposed: [12, 16)
  };
  const std::vector<int> steps = {0};
  const ExposedCommunication exposed = exposed_communication(events, 0, steps);
  EXPECT_EQ(exposed.total, 6);  // [10, 16)
  SimTime parts = 0;
  for (const ExposedPart& p : exposed.largest) parts += p.exposed;
  EXPECT_EQ(parts, 8);
  const OverlapMetrics m = metrics_per_rank(events).at(0);
  EXPECT_EQ(exposed.total, m.comm - m.overlap);
}

TEST(TraceMetrics, NestedEventsCountOnce) {
  const OverlapMetrics m = only_rank({compute(0, 10), compute(2, 4, Lane::memcpy), compute(8, 12, Lane::memcpy),
                                      gather(1, 9), gather(3, 5)});
  EXPECT_EQ(m.compute, 12);
  EXPECT_EQ(m.comm, 8);
  EXPECT_EQ(m.overlap, 8);
  EXPECT_EQ(m.busy, 12);
}

// Collectives on several streams, one on the compute stream (SYNC), and a copy, which is neither
// compute nor communication but is device work.
TEST(TraceMetrics, SeveralStreams) {
  const OverlapMetrics m = only_rank({
      gather(0, 4),
      ev(Lane::reduce_scatter, OpCategory::reduce_scatter, 2, 6),
      ev(Lane::compute, OpCategory::all_reduce, 9, 11),
      compute(5, 9),
      compute(11, 14),
      ev(Lane::memcpy, OpCategory::memcpy, 20, 22),
  });
  EXPECT_EQ(m.comm, 8);     // [0, 6) and [9, 11)
  EXPECT_EQ(m.compute, 7);  // [5, 9) and [11, 14)
  EXPECT_EQ(m.overlap, 1);  // [5, 6)
  EXPECT_EQ(m.exposed_comm(), 7);
  EXPECT_DOUBLE_EQ(m.overlap_percent(), 12.5);
  EXPECT_EQ(m.span, 22);
  EXPECT_EQ(m.busy, 16);
  EXPECT_EQ(m.idle(), 6);  // [14, 20)
}

TEST(TraceMetrics, IdleIsTheGapsBetweenDeviceWorkNotTheHost) {
  std::vector<TraceEvent> events = {compute(0, 2), compute(5, 7), gather(10, 11)};
  events.push_back(ev(Lane::host, OpCategory::host, -100, 1000));  // host time is not device time
  const OverlapMetrics m = only_rank(events);
  EXPECT_EQ(m.span, 11);
  EXPECT_EQ(m.busy, 5);
  EXPECT_EQ(m.idle(), 6);
}

TEST(TraceMetrics, EmptyAndHostOnly) {
  EXPECT_TRUE(metrics_per_rank({}).empty());
  const OverlapMetrics m = only_rank({ev(Lane::host, OpCategory::host, 0, 50)});
  EXPECT_EQ(m.span, 0);
  EXPECT_EQ(m.busy, 0);
  EXPECT_EQ(m.comm, 0);
  EXPECT_DOUBLE_EQ(m.overlap_percent(), 0.0);  // nothing to hide
  const OverlapMetrics zero = only_rank({compute(3, 3), gather(4, 4)});
  EXPECT_EQ(zero.span, 1);
  EXPECT_EQ(zero.busy, 0);
}

TEST(TraceMetrics, RanksAndStepsAreMeasuredApart) {
  const std::vector<TraceEvent> events = {
      ev(Lane::compute, OpCategory::compute, 0, 10, 1, 0),   ev(Lane::all_gather, OpCategory::all_gather, 5, 15, 1, 0),
      ev(Lane::compute, OpCategory::compute, 20, 30, 1, 1),  ev(Lane::all_gather, OpCategory::all_gather, 20, 30, 1, 1),
      ev(Lane::compute, OpCategory::compute, 0, 4, 0, 0),    ev(Lane::all_gather, OpCategory::all_gather, 4, 6, 0, 0),
      ev(Lane::compute, OpCategory::compute, 100, 101, 0),  // outside any step
  };
  const std::vector<OverlapMetrics> ranks = metrics_per_rank(events);
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].rank, 0);
  EXPECT_EQ(ranks[0].step, -1);
  EXPECT_EQ(ranks[0].span, 101);
  EXPECT_EQ(ranks[0].exposed_comm(), 2);
  EXPECT_EQ(ranks[1].rank, 1);
  EXPECT_EQ(ranks[1].comm, 20);
  EXPECT_EQ(ranks[1].overlap, 15);
  EXPECT_DOUBLE_EQ(ranks[1].overlap_percent(), 75.0);

  const std::vector<OverlapMetrics> steps = metrics_per_step(events);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(std::pair(steps[0].rank, steps[0].step), std::pair(0, 0));
  EXPECT_EQ(steps[0].span, 6);
  EXPECT_EQ(std::pair(steps[1].rank, steps[1].step), std::pair(1, 0));
  EXPECT_DOUBLE_EQ(steps[1].overlap_percent(), 50.0);
  EXPECT_EQ(std::pair(steps[2].rank, steps[2].step), std::pair(1, 1));
  EXPECT_DOUBLE_EQ(steps[2].overlap_percent(), 100.0);
  EXPECT_EQ(steps[2].span, 10);
}

TEST(TraceMetrics, EventEndingBeforeItBeginsIsAnError) {
  EXPECT_THROW(metrics_per_rank(std::vector<TraceEvent>{compute(5, 4)}), Error);
}

// Against a nanosecond-by-nanosecond count on a small random timeline.
TEST(TraceMetrics, AgreesWithCountingEveryNanosecond) {
  std::mt19937 rng(42);
  constexpr SimTime kHorizon = 300;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<TraceEvent> events;
    for (int i = 0; i < 40; ++i) {
      const SimTime b = static_cast<SimTime>(rng() % kHorizon);
      const SimTime e = std::min(kHorizon, b + static_cast<SimTime>(rng() % 30));
      const auto category = static_cast<OpCategory>(rng() % (kOpCategoryCount - 1));  // all but host
      events.push_back(ev(kAllLanes[rng() % kStreamCount], category, b, e));
    }
    SimTime comm = 0, comp = 0, both = 0, busy = 0, first = kHorizon, last = 0;
    for (SimTime t = 0; t < kHorizon; ++t) {
      bool c = false, k = false, any = false;
      for (const TraceEvent& e : events) {
        if (e.begin > t || t >= e.end) continue;
        any = true;
        c = c || is_communication(e.category);
        k = k || e.category == OpCategory::compute;
      }
      comm += c;
      comp += k;
      both += c && k;
      busy += any;
    }
    for (const TraceEvent& e : events) first = std::min(first, e.begin), last = std::max(last, e.end);
    const OverlapMetrics m = only_rank(events);
    EXPECT_EQ(m.comm, comm) << "trial " << trial;
    EXPECT_EQ(m.compute, comp) << "trial " << trial;
    EXPECT_EQ(m.overlap, both) << "trial " << trial;
    EXPECT_EQ(m.busy, busy) << "trial " << trial;
    EXPECT_EQ(m.span, last - first) << "trial " << trial;
  }
}

TEST(TraceMetrics, CommunicationTimeSumsOneRanksCollectivesOfOneStep) {
  const std::vector<TraceEvent> events = {
      ev(Lane::all_gather, OpCategory::all_gather, 0, 10, 0, 1),
      ev(Lane::reduce_scatter, OpCategory::reduce_scatter, 5, 12, 0, 1),  // overlapping: counted in full
      ev(Lane::compute, OpCategory::all_reduce, 20, 21, 0, 1),             // SYNC: a collective on compute
      ev(Lane::compute, OpCategory::compute, 0, 50, 0, 1),
      ev(Lane::memcpy, OpCategory::memcpy, 0, 50, 0, 1),
      ev(Lane::host, OpCategory::host, 0, 50, 0, 1),
      ev(Lane::all_gather, OpCategory::all_gather, 30, 40, 0, 2),  // another step
      ev(Lane::all_gather, OpCategory::all_gather, 0, 100, 1, 1),  // another rank
  };
  EXPECT_EQ(communication_time(events, 0, 1), 10 + 7 + 1);
  EXPECT_EQ(communication_time(events, 0, 2), 10);
  EXPECT_EQ(communication_time(events, 0), 28);
  EXPECT_EQ(communication_time(events, 1, 1), 100);
  EXPECT_EQ(communication_time(events, 2), 0);
  // Serialised collectives: the sum is |comm|.
  const std::vector<TraceEvent> serial = {gather(0, 4), ev(Lane::reduce_scatter, OpCategory::reduce_scatter, 4, 9),
                                          gather(12, 13)};
  EXPECT_EQ(communication_time(serial, 0), only_rank(serial).comm);
}

// On nodes a rank has a link within its node and one between nodes, each busy in turn and both at once: comm is
// the busier one's sum, what no schedule hides.
TEST(TraceMetrics, CommunicationTimeIsTheBusierOfARanksTwoLinks) {
  std::vector<TraceEvent> events = {
      ev(Lane::all_gather, OpCategory::all_gather, 0, 10, 0, 1),           // within the node
      ev(Lane::reduce_scatter, OpCategory::all_reduce, 0, 30, 0, 1),       // between nodes, at the same time
      ev(Lane::reduce_scatter, OpCategory::reduce_scatter, 30, 35, 0, 1),  // within the node
  };
  events[1].link = RankLink::between_nodes;
  const std::array<SimTime, kRankLinkCount> busy = link_busy_times(events, 0, 1);
  EXPECT_EQ(busy[static_cast<std::size_t>(RankLink::in_node)], 15);
  EXPECT_EQ(busy[static_cast<std::size_t>(RankLink::between_nodes)], 30);
  EXPECT_EQ(communication_time(events, 0, 1), 30);
  events[1].link = RankLink::in_node;  // one link for all: the sum
  EXPECT_EQ(communication_time(events, 0, 1), 45);
}

CounterSample sample(int rank, SimTime time, MemTag tag, std::int64_t tag_live) {
  return CounterSample{rank, time, tag, tag_live, 0};
}

TEST(TraceMetrics, PeakLiveBytesOfSomeTagsInAWindow) {
  const std::vector<CounterSample> counters = {
      sample(0, 0, MemTag::param_full, 100),   // before the window: live when it opens
      sample(0, 5, MemTag::activation, 1000),  // a tag not asked for
      sample(1, 12, MemTag::param_full, 9999), // another rank
      sample(0, 10, MemTag::grad_full, 50),    // 150 at 10
      sample(0, 12, MemTag::param_full, 0),    //  50
      sample(0, 15, MemTag::param_full, 300),  // 350: the peak in [10, 20]
      sample(0, 15, MemTag::grad_full, 0),     // 300
      sample(0, 20, MemTag::param_full, 0),    //   0
      sample(0, 25, MemTag::param_full, 900),  // after the window
  };
  const std::array<MemTag, 2> gathered = {MemTag::param_full, MemTag::grad_full};
  EXPECT_EQ(peak_live_bytes(counters, 0, gathered, 10, 20), 350);
  EXPECT_EQ(peak_live_bytes(counters, 0, gathered, 0, 100), 900);
  EXPECT_EQ(peak_live_bytes(counters, 0, gathered, 1, 9), 100);    // nothing changes inside: what was live
  EXPECT_EQ(peak_live_bytes(counters, 0, gathered, 21, 24), 0);
  EXPECT_EQ(peak_live_bytes(counters, 0, std::array<MemTag, 1>{MemTag::param_full}, 10, 14), 100);
  EXPECT_EQ(peak_live_bytes(counters, 1, gathered, 0, 100), 9999);
  EXPECT_EQ(peak_live_bytes(counters, 2, gathered, 0, 100), 0);
}

}  // namespace
}  // namespace fsdplab
