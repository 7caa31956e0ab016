// The first runnable job end to end: the streams demo on 2 ranks writes a trace whose JSON carries
// the Kineto-style fields, and the overlap it prints is what the timeline in that file shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <nlohmann/json.hpp>

#include "engine/runtime/presets.hpp"
#include "engine/trace/chrome_trace.hpp"
#include "engine/trace/trace_metrics.hpp"
#include "engine/trace/trace_recorder.hpp"
#include "engine/train/stream_demo.hpp"

namespace fsdplab {
namespace {

struct DemoRun {
  std::vector<StreamDemoStep> steps;
  TraceData trace;
};

DemoRun run_demo(StreamDemoConfig config, const std::string& link = "nvlink4") {
  const auto& presets = PresetCatalog::builtin();
  std::vector<TraceRecorder> recorders(static_cast<std::size_t>(config.world));
  std::vector<TraceSink*> sinks;
  for (auto& r : recorders) sinks.push_back(&r);
  DemoRun run;
  run.steps = run_stream_demo(config, presets.device("h100-sxm"), presets.link(link), sinks);
  for (const auto& r : recorders) run.trace.append(r.data());
  return run;
}

StreamDemoConfig small_config() {
  StreamDemoConfig config;
  config.world = 2;
  config.layers = 4;
  config.width = 256;
  config.tokens = 2048;  // compute-bound layers, so ASYNC can hide every prefetched gather
  return config;
}

// Which gathers of `step` on `rank` overlap a compute op of the same rank: read off the timeline.
int gathers_overlapping_compute(const TraceData& trace, int rank, int step, int* total) {
  std::vector<const TraceEvent*> gathers, computes;
  for (const TraceEvent& e : trace.events) {
    if (e.rank != rank || e.step != step) continue;
    if (e.category == OpCategory::all_gather) gathers.push_back(&e);
    if (e.category == OpCategory::compute) computes.push_back(&e);
  }
  *total = static_cast<int>(gathers.size());
  return static_cast<int>(std::count_if(gathers.begin(), gathers.end(), [&](const TraceEvent* g) {
    return std::any_of(computes.begin(), computes.end(),
                       [&](const TraceEvent* c) { return c->begin < g->end && g->begin < c->end; });
  }));
}

TEST(StreamDemo, AsyncPrefetchHidesAllButTheFirstGather) {
  const DemoRun run = run_demo(small_config());
  ASSERT_EQ(run.steps.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    int total = 0;
    EXPECT_EQ(gathers_overlapping_compute(run.trace, rank, 0, &total), 0) << "SYNC overlaps nothing";
    EXPECT_EQ(total, 4);
    EXPECT_EQ(gathers_overlapping_compute(run.trace, rank, 1, &total), 3) << "ASYNC: N-1 of N gathers overlap";
  }
  EXPECT_LT(run.steps[1].end - run.steps[1].begin, run.steps[0].end - run.steps[0].begin);
}

TEST(StreamDemo, CollectivesStartTogetherOnEveryRank) {
  const DemoRun run = run_demo(small_config());
  std::map<std::pair<int, int>, std::vector<SimTime>> begins;  // (step, layer) -> begin per rank
  for (const TraceEvent& e : run.trace.events)
    if (e.category == OpCategory::all_gather) begins[{e.step, e.unit}].push_back(e.begin);
  ASSERT_EQ(begins.size(), 8u);
  for (const auto& [key, times] : begins) {
    ASSERT_EQ(times.size(), 2u);
    EXPECT_EQ(times[0], times[1]) << "step " << key.first << " layer " << key.second;
  }
}

TEST(StreamDemo, EveryRankAndModeComputesTheSameOutput) {
  // Each rank gathers the same full weights from the shards, so every rank's output is the same, in
  // both modes: the schedules differ, the numerics may not (and the race detector, which throws by
  // default, stayed silent through both).
  const DemoRun run = run_demo(small_config());
  const double reference = run.steps[0].output_sum[0];
  EXPECT_TRUE(std::isfinite(reference));
  EXPECT_NE(reference, 0.0);
  for (const StreamDemoStep& step : run.steps)
    for (double sum : step.output_sum) EXPECT_EQ(sum, reference);
}

TEST(StreamDemo, TraceFileCarriesKinetoFieldsAndItsOverlapMatchesThePrintedOne) {
  const DemoRun run = run_demo(small_config());
  const auto path = std::filesystem::temp_directory_path() / "fsdplab_stream_demo_trace.json";
  TraceMeta meta;
  meta.world_size = 2;
  write_chrome_trace(path, run.trace, meta);

  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_TRUE(doc.contains("distributedInfo"));
  EXPECT_EQ(doc["distributedInfo"]["world_size"], 2);
  EXPECT_EQ(doc["distributedInfo"]["backend"], "sim");

  // Recompute overlap % per (rank, step) from the file alone, by sampling the timeline at every
  // event boundary: independent of trace_metrics' interval arithmetic.
  std::map<std::pair<int, int>, std::vector<std::tuple<double, double, bool>>> spans;  // begin, end, is_comm
  std::map<int, std::set<std::string>> thread_names;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names[e["pid"]].insert(e["args"]["name"]);
    if (e["ph"] != "X") continue;
    ASSERT_TRUE(e.contains("cat") && e["args"].contains("stream") && e["args"].contains("device")) << e.dump();
    const std::string category = e["args"]["category"];
    const bool comm = category == "all_gather";
    if (!comm && category != "compute") continue;
    const double ts = e["ts"], dur = e["dur"];
    spans[{e["pid"], e["args"]["step"]}].emplace_back(ts, ts + dur, comm);
  }
  for (int pid = 0; pid < 2; ++pid) EXPECT_GE(thread_names[pid].size(), 2u) << "a named track per stream";

  std::vector<OverlapMetrics> printed = metrics_per_step(run.trace.events);
  ASSERT_EQ(printed.size(), 4u);
  for (const OverlapMetrics& m : printed) {
    const auto& s = spans[{m.rank, m.step}];
    std::vector<double> cuts;
    for (const auto& [b, e, c] : s) {
      cuts.push_back(b);
      cuts.push_back(e);
    }
    std::sort(cuts.begin(), cuts.end());
    double comm = 0, both = 0;
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
      const double mid = (cuts[i] + cuts[i + 1]) / 2;
      bool in_comm = false, in_compute = false;
      for (const auto& [b, e, c] : s)
        if (b <= mid && mid < e) (c ? in_comm : in_compute) = true;
      if (in_comm) comm += cuts[i + 1] - cuts[i];
      if (in_comm && in_compute) both += cuts[i + 1] - cuts[i];
    }
    ASSERT_GT(comm, 0);
    EXPECT_NEAR(100 * both / comm, m.overlap_percent(), 0.01) << "rank " << m.rank << " step " << m.step;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace fsdplab
