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

TEST(KernelBreakdown, AnOpGroupsByNameAndACollectiveByItsKind) {
  TraceEvent gather = work("all_gather transformer.h.0.flat_param_full", 0, 0, 1'000, Lane::all_gather);
  gather.category = OpCategory::all_gather;
  TraceEvent reduce = work("reduce_scatter transformer.h.0.flat_grad_shard", 0, 0, 1'000, Lane::reduce_scatter);
  reduce.category = OpCategory::reduce_scatter;
  EXPECT_EQ(op_group(gather), "all_gather");
  EXPECT_EQ(op_group(reduce), "reduce_scatter");
  EXPECT_EQ(op_group(work("matmul", 0, 0, 1'000)), "matmul");
}

TEST(KernelBreakdown, ChangesPairEachKeyOfTwoSchedulesLargestChangeFirst) {
  // SYNC: matmul 2 x 3 ms, adamw 1 x 1 ms, fill 1 x 1 ms. ASYNC: the matmuls 0.5 ms longer each, adamw in 3
  // launches of 0.5 ms, fill the same, and a copy SYNC did not make.
  const std::vector<TraceEvent> sync = {work("matmul", 0, 0, 3'000'000), work("matmul", 0, 3'000'000, 6'000'000),
                                        work("adamw", 0, 6'000'000, 7'000'000), work("fill", 0, 7'000'000, 8'000'000)};
  const std::vector<TraceEvent> async = {
      work("matmul", 0, 0, 3'500'000),          work("matmul", 0, 3'500'000, 7'000'000),
      work("adamw", 0, 7'000'000, 7'500'000),   work("adamw", 0, 7'500'000, 8'000'000),
      work("adamw", 0, 8'000'000, 8'500'000),   work("fill", 0, 8'500'000, 9'500'000),
      work("copy", 0, 0, 200'000, Lane::memcpy)};
  const std::vector<KernelChange> changes =
      kernel_changes(kernel_breakdown(sync, 0, 0, 1, by_name), kernel_breakdown(async, 0, 0, 1, by_name));
  ASSERT_EQ(changes.size(), 4u);
  EXPECT_EQ(changes[0].key, "matmul");
  EXPECT_DOUBLE_EQ(changes[0].before_ms, 6);
  EXPECT_DOUBLE_EQ(changes[0].after_ms, 7);
  EXPECT_DOUBLE_EQ(changes[0].change_ms(), 1);
  EXPECT_EQ(changes[1].key, "adamw");
  EXPECT_DOUBLE_EQ(changes[1].before_calls, 1);
  EXPECT_DOUBLE_EQ(changes[1].after_calls, 3);
  EXPECT_DOUBLE_EQ(changes[1].change_ms(), 0.5);
  EXPECT_EQ(changes[2].key, "copy");  // only in the second: 0 calls and 0 ms in the first
  EXPECT_DOUBLE_EQ(changes[2].before_calls, 0);
  EXPECT_DOUBLE_EQ(changes[2].change_ms(), 0.2);
  EXPECT_EQ(changes[3].key, "fill");
  EXPECT_DOUBLE_EQ(changes[3].change_ms(), 0);
  // A change down counts by its size: the schedules swapped, adamw's -0.5 still comes before the copy's -0.2.
  const std::vector<KernelChange> back =
      kernel_changes(kernel_breakdown(async, 0, 0, 1, by_name), kernel_breakdown(sync, 0, 0, 1, by_name));
  ASSERT_EQ(back.size(), 4u);
  EXPECT_EQ(back[1].key, "adamw");
  EXPECT_DOUBLE_EQ(back[1].change_ms(), -0.5);
  EXPECT_EQ(back[2].key, "copy");
  EXPECT_DOUBLE_EQ(back[2].after_ms, 0);
}

}  // namespace
}  // namespace fsdplab
