// The per-kernel breakdown of `bench --what kernels`, on hand-built traces whose sums are known.
#include "engine/runtime/error.hpp"
#include "engine/trace/kernel_breakdown.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::contains;
using testing::error_of;

TraceEvent work(const std::string& name, int step, SimTime begin, SimTime end, Lane lane = Lane::compute,
                int rank = 0) {
  TraceEvent e;
  e.rank = rank;
  e.lane = lane;
  e.name = name;
  e.step = step;
  e.phase = step >= 0 ? "forward" : "";
  e.begin = begin;
  e.end = end;
  return e;
}

std::string by_name(const TraceEvent& e) { return e.name; }

TEST(KernelBreakdown, GroupsSumsPerStepAndSortsByTime) {
  // Steps 1 and 2 measured: gemm 2 calls of 3 ms each step, add 1 call of 1 ms, a copy of 2 ms on its lane.
  const std::vector<TraceEvent> events = {
      work("gemm", 1, 0, 3'000'000),       work("gemm", 1, 3'000'000, 6'000'000),
      work("add", 1, 6'000'000, 7'000'000), work("copy", 1, 1'000'000, 3'000'000, Lane::memcpy),
      work("gemm", 2, 10'000'000, 13'000'000), work("gemm", 2, 13'000'000, 16'000'000),
      work("add", 2, 16'000'000, 17'000'000), work("copy", 2, 11'000'000, 13'000'000, Lane::memcpy)};
  const KernelBreakdown b = kernel_breakdown(events, 0, 1, 2, by_name);
  ASSERT_EQ(b.groups.size(), 3u);
  EXPECT_EQ(b.groups[0].key, "gemm");
  EXPECT_DOUBLE_EQ(b.groups[0].calls_per_step, 2);
  EXPECT_DOUBLE_EQ(b.groups[0].ms_per_step, 6);
  EXPECT_EQ(b.groups[1].key, "copy");  // copies are GPU time too; overlapping the gemm, it still counts
  EXPECT_DOUBLE_EQ(b.groups[1].ms_per_step, 2);
  EXPECT_EQ(b.groups[2].key, "add");
  EXPECT_DOUBLE_EQ(b.groups[2].calls_per_step, 1);
  EXPECT_DOUBLE_EQ(b.gpu_ms_per_step, 9);
  EXPECT_DOUBLE_EQ(b.groups[0].share, 6.0 / 9);
  double shares = 0;
  for (const KernelGroup& g : b.groups) shares += g.share;
  EXPECT_DOUBLE_EQ(shares, 1);
}

TEST(KernelBreakdown, LeavesOutOtherStepsRanksAndTheHost) {
  const std::vector<TraceEvent> events = {
      work("warmup", 0, 0, 5'000'000),                  // before the measured steps
      work("init", -1, 0, 5'000'000),                   // outside any step
      work("later", 2, 0, 5'000'000),                   // after them
      work("peer", 1, 0, 5'000'000, Lane::compute, 1),  // another rank
      work("wait", 1, 0, 5'000'000, Lane::host),        // the host: no device time
      work("kept", 1, 0, 2'000'000)};
  const KernelBreakdown b = kernel_breakdown(events, 0, 1, 1, by_name);
  ASSERT_EQ(b.groups.size(), 1u);
  EXPECT_EQ(b.groups[0].key, "kept");
  EXPECT_DOUBLE_EQ(b.groups[0].share, 1);
  EXPECT_DOUBLE_EQ(b.gpu_ms_per_step, 2);
}

TEST(KernelBreakdown, TheKeyChoosesTheGroupsAndEqualTimesKeepKeyOrder) {
  const std::vector<TraceEvent> events = {work("b", 0, 0, 1'000), work("a", 0, 1'000, 2'000),
                                          work("c", 0, 2'000, 3'000)};
  const KernelBreakdown by_phase = kernel_breakdown(events, 0, 0, 1, [](const TraceEvent& e) { return e.phase; });
  ASSERT_EQ(by_phase.groups.size(), 1u);
  EXPECT_EQ(by_phase.groups[0].key, "forward");
  EXPECT_DOUBLE_EQ(by_phase.groups[0].calls_per_step, 3);
  const KernelBreakdown named = kernel_breakdown(events, 0, 0, 1, by_name);
  ASSERT_EQ(named.groups.size(), 3u);
  EXPECT_EQ(named.groups[0].key, "a");
  EXPECT_EQ(named.groups[2].key, "c");
}

TEST(KernelBreakdown, NoDeviceWorkGivesNoGroupsAndNoShares) {
  const KernelBreakdown b = kernel_breakdown({}, 0, 0, 3, by_name);
  EXPECT_TRUE(b.groups.empty());
  EXPECT_DOUBLE_EQ(b.gpu_ms_per_step, 0);
}

TEST(KernelBreakdown, RefusesNoStepsAndBackwardEvents) {
  EXPECT_TRUE(contains(error_of([] { kernel_breakdown({}, 0, 0, 0, by_name); }), "0 steps; expected at least 1"));
  const std::vector<TraceEvent> backwards = {work("k", 0, 10, 5)};
  EXPECT_TRUE(contains(error_of([&] { kernel_breakdown(backwards, 0, 0, 1, by_name); }),
                       "'k' on rank 0 ends at 5 ns, before it begins at 10 ns"));
}

}  // namespace
}  // namespace fsdplab
