// The sim device's virtual clock: ops wait for events, streams overlap, the host runs ahead until it
// synchronises, and the same program gives the same timeline every time.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "engine/runtime/error.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::make_sim_device;

// An op of a fixed duration that touches nothing.
OpSpec timed(const std::string& name, SimTime duration, OpCategory category = OpCategory::compute) {
  OpSpec spec;
  spec.name = name;
  spec.category = category;
  spec.duration = duration;
  return spec;
}

TEST(RuntimeClock, OpsOnOneStreamRunBackToBack) {
  auto dev = make_sim_device();
  const SimTime launch = dev->cost_model().launch_overhead();
  const OpId a = dev->launch(Lane::compute, timed("a", 100'000), {});
  const OpId b = dev->launch(Lane::compute, timed("b", 50'000), {});
  EXPECT_EQ(dev->op(a).begin, launch);
  EXPECT_EQ(dev->op(a).end, launch + 100'000);
  EXPECT_EQ(dev->op(b).begin, dev->op(a).end);  // the stream was busy, not the host
  EXPECT_EQ(dev->host_time(), 2 * launch);       // the host ran ahead: it only paid two launches
}

TEST(RuntimeClock, TwoStreamsOverlap) {
  auto dev = make_sim_device();
  const OpId comm = dev->launch(Lane::all_gather, timed("gather", 100'000, OpCategory::all_gather), {});
  const OpId comp = dev->launch(Lane::compute, timed("matmul", 100'000), {});
  EXPECT_LT(dev->op(comp).begin, dev->op(comm).end);
  EXPECT_LT(dev->op(comm).begin, dev->op(comp).end);
}

TEST(RuntimeClock, AnOpWaitsForItsEvent) {
  auto dev = make_sim_device();
  dev->launch(Lane::all_gather, timed("gather", 200'000, OpCategory::all_gather), {});
  const OpId gather_id = dev->ops().back().id;
  Event gathered("gathered");
  dev->record(gathered, Lane::all_gather);
  dev->wait(Lane::compute, gathered);
  const OpId use = dev->launch(Lane::compute, timed("use", 10'000), {});
  EXPECT_EQ(dev->op(use).begin, gathered.time());
  EXPECT_EQ(gathered.time(), dev->op(gather_id).end);
  ASSERT_EQ(dev->op(use).deps.size(), 1u);
  EXPECT_EQ(dev->op(use).deps[0], (OpRef{0, gather_id}));
  // The wait is consumed by the op that followed it.
  const OpId next = dev->launch(Lane::compute, timed("next", 10'000), {});
  EXPECT_TRUE(dev->op(next).deps.empty());
}

TEST(RuntimeClock, HostSyncMovesHostTime) {
  auto dev = make_sim_device();
  dev->launch(Lane::compute, timed("long", 5'000'000), {});
  Event done("done");
  dev->record(done, Lane::compute);
  EXPECT_LT(dev->host_time(), done.time());
  dev->synchronize(done);
  EXPECT_EQ(dev->host_time(), done.time());
  // After the sync the next op cannot start before the host issues it.
  const OpId next = dev->launch(Lane::compute, timed("next", 1'000), {});
  EXPECT_EQ(dev->op(next).begin, done.time() + dev->cost_model().launch_overhead());
}

TEST(RuntimeClock, EventOnIdleStreamCompletesWhenIssued) {
  auto dev = make_sim_device();
  dev->host_work("python overhead", 70'000);
  Event e("idle");
  dev->record(e, Lane::reduce_scatter);
  EXPECT_EQ(e.time(), 70'000);
}

TEST(RuntimeClock, CrossRankEventGivesCollectiveShapedWait) {
  auto r0 = make_sim_device(0);
  auto r1 = make_sim_device(1);
  r1->launch(Lane::compute, timed("slow rank", 300'000), {});
  Event ready0("ready0"), ready1("ready1");
  r0->record(ready0, Lane::compute);
  r1->record(ready1, Lane::compute);
  for (SimDevice* d : {r0.get(), r1.get()}) {
    d->wait(Lane::all_gather, ready0);
    d->wait(Lane::all_gather, ready1);
  }
  const OpId g0 = r0->launch(Lane::all_gather, timed("gather", 10'000, OpCategory::all_gather), {});
  EXPECT_EQ(r0->op(g0).begin, ready1.time());  // rank 0 waits for the slower rank
}

TEST(RuntimeClock, ElapsedMeasuresBetweenEvents) {
  auto dev = make_sim_device();
  Event start("start"), stop("stop");
  dev->record(start, Lane::compute);
  dev->launch(Lane::compute, timed("work", 2'500'000), {});
  dev->record(stop, Lane::compute);
  EXPECT_DOUBLE_EQ(ns_to_ms(stop.time() - start.time()), 2.5 + ns_to_ms(dev->cost_model().launch_overhead()));
}

TEST(RuntimeClock, WaitingOnAnUnrecordedEventIsAnError) {
  auto dev = make_sim_device();
  Event never("never-recorded");
  try {
    dev->wait(Lane::compute, never);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("never-recorded"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("never recorded"), std::string::npos);
  }
  EXPECT_THROW(dev->synchronize(never), Error);
  EXPECT_THROW((void)never.time(), Error);
}

TEST(RuntimeClock, CostModelDecidesDuration) {
  auto dev = make_sim_device();
  const DevicePreset& p = dev->cost_model().device();
  OpSpec gemm;
  gemm.name = "gemm";
  gemm.cost = {2.0 * 4096 * 4096 * 4096, 3.0 * 4096 * 4096 * 2, DType::bf16, true};
  const OpId id = dev->launch(Lane::compute, gemm, {});
  const double expected = gemm.cost.flops / p.matmul_flops_bf16;  // compute-bound
  EXPECT_EQ(dev->op(id).end - dev->op(id).begin, seconds_to_ns(expected));
  OpSpec copy;
  copy.name = "copy";
  copy.cost = {0, 1e9, DType::f32, false};  // memory-bound
  const OpId c = dev->launch(Lane::compute, copy, {});
  EXPECT_EQ(dev->op(c).end - dev->op(c).begin, seconds_to_ns(1e9 / p.memory_bandwidth));
}

std::vector<OpRecord> run_program() {
  auto dev = make_sim_device();
  Tensor x = Tensor::empty(*dev, {256}, DType::f32, MemTag::activation, "x");
  Event e;
  for (int i = 0; i < 20; ++i) {
    OpSpec g = timed("g", 1000 * (i % 3 + 1), OpCategory::all_gather);
    g.writes = {x.access()};
    dev->launch(Lane::all_gather, g, {});
    dev->record(e, Lane::all_gather);
    dev->wait(Lane::compute, e);
    OpSpec c = timed("c", 1500);
    c.reads = {x.access()};
    dev->launch(Lane::compute, c, {});
    dev->record(e, Lane::compute);
    dev->wait(Lane::all_gather, e);
    if (i % 7 == 0) dev->synchronize();
  }
  return dev->ops();
}

TEST(RuntimeClock, SameProgramSameTimeline) {
  const auto a = run_program();
  const auto b = run_program();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].begin, b[i].begin) << i;
    EXPECT_EQ(a[i].end, b[i].end) << i;
    EXPECT_EQ(a[i].lane, b[i].lane) << i;
    EXPECT_EQ(a[i].deps, b[i].deps) << i;
  }
}

// A duration the int64 nanosecond clock cannot hold is refused; cast, it would wrap to a negative time.
TEST(RuntimeClock, DurationsPastTheClockAreRefused) {
  EXPECT_EQ(seconds_to_ns(1e6), SimTime{1'000'000'000'000'000});
  for (double seconds : {1e7, 1e300, std::numeric_limits<double>::infinity(), std::nan("")}) {
    const std::string error = testing::error_of([&] { seconds_to_ns(seconds); });
    EXPECT_TRUE(testing::contains(error, "on the virtual clock (at most 1e6 s)")) << seconds << ": " << error;
  }
}

}  // namespace
}  // namespace fsdplab
