// `fsdplab view`: exported traces back in the dashboard's panels; files that are not traces are named
// with what was wrong and cost only themselves; damaged files (fuzzed) never crash the loader or a frame.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "dashboard_testing.hpp"
#include "engine/trace/chrome_trace.hpp"
#include "engine/trace/trace_recorder.hpp"

namespace fsdplab::app {
namespace {

namespace fs = std::filesystem;

class Replayed : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fsdplab_replay_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A short SYNC or ASYNC run of the dashboard's default kind, exported as `fsdplab run --trace` does.
  std::string export_run(bool sync, const std::string& name, const std::string& backend = "sim") {
    SessionSettings settings = tiny_settings(3);
    settings.comparison = sync ? Comparison::sync_only : Comparison::async_only;
    SessionSettings::PlannedRun planned = settings.plan().front();
    std::vector<TraceRecorder> recorders(2);
    for (TraceRecorder& r : recorders) planned.run.sinks.push_back(&r);
    train_fsdp(planned.run, PresetCatalog::builtin(), nullptr);
    TraceData all;
    for (const TraceRecorder& r : recorders) all.append(r.data());
    TraceMeta meta;
    meta.world_size = 2;
    meta.mode = sync ? "sync" : "async";
    meta.backend = backend;
    write_chrome_trace(path(name), all, meta);
    return path(name);
  }

  fs::path dir_;
};

void spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

TEST_F(Replayed, ExportedRunsComeBackAsSourcesWithTheirModeAndSteps) {
  const std::string sync = export_run(true, "sync.json");
  const std::string async = export_run(false, "async.json");
  Replay replay = load_replay({sync, async});
  ASSERT_TRUE(replay.errors.empty()) << replay.errors.front();
  const TraceStore& store = replay.store;
  ASSERT_EQ(store.sources().size(), 2u);
  EXPECT_EQ(store.source(0).label, "sync.json");
  EXPECT_TRUE(store.source(0).sync);
  EXPECT_FALSE(store.source(1).sync);
  EXPECT_EQ(store.source(0).steps.size(), 3u);
  EXPECT_EQ(store.source(0).world, 2);
  const StepTimePanel::Summary c = summarize_steps(store);
  EXPECT_EQ(store.source(0).last_step, 2);
  EXPECT_EQ(c.steps_compared, 1);  // step 1: step 0 warms up, step 2 is the run's last
  EXPECT_GT(c.t_sync_ms, c.t_async_ms);

  HeadlessImGui imgui;
  Dashboard dashboard(std::move(replay));
  frames_until(imgui, dashboard, [] { return true; });
  EXPECT_EQ(dashboard.timeline().lanes_drawn().size(), dashboard.store().lanes().size());
  EXPECT_EQ(dashboard.step_times().summary().steps_compared, 1);
}

// A trace a cuda run wrote (its backend "cuda", or "nccl") is in wall-clock time, a sim run's in virtual time:
// the step-time panel says which.
TEST_F(Replayed, ATraceKeepsItsClockVirtualForSimWallForCuda) {
  const std::string sim = export_run(false, "sim.json");
  const std::string gpu = export_run(false, "cuda.json", "cuda");
  Replay sim_only = load_replay({sim});
  EXPECT_FALSE(sim_only.store.source(0).wall_clock);
  EXPECT_EQ(clock_kind(sim_only.store, "ms"), "virtual ms");
  Replay gpu_only = load_replay({gpu});
  EXPECT_TRUE(gpu_only.store.source(0).wall_clock);
  EXPECT_EQ(clock_kind(gpu_only.store, "ms"), "wall ms");
  Replay both = load_replay({sim, gpu});
  EXPECT_EQ(clock_kind(both.store, "ms"), "ms: virtual for sim runs, wall for cuda runs");
}

TEST_F(Replayed, FilesThatAreNotTracesAreNamedAndTheOthersStillLoad) {
  const std::string good = export_run(false, "good.json");
  spit(path("notjson.json"), "this is not json");
  std::ifstream in(good);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  spit(path("truncated.json"), text.substr(0, text.size() / 2));
  nlohmann::json doc = nlohmann::json::parse(text);
  doc.erase("distributedInfo");
  spit(path("missing.json"), doc.dump());
  Replay replay =
      load_replay({path("notjson.json"), good, path("truncated.json"), path("missing.json"), path("absent.json")});
  ASSERT_EQ(replay.errors.size(), 4u);
  EXPECT_NE(replay.errors[0].find("notjson.json"), std::string::npos) << replay.errors[0];
  EXPECT_NE(replay.errors[0].find("not valid JSON"), std::string::npos) << replay.errors[0];
  EXPECT_NE(replay.errors[1].find("truncated.json"), std::string::npos) << replay.errors[1];
  EXPECT_NE(replay.errors[2].find("has no 'distributedInfo'"), std::string::npos) << replay.errors[2];
  EXPECT_NE(replay.errors[3].find("absent.json"), std::string::npos) << replay.errors[3];
  ASSERT_EQ(replay.files.size(), 1u);
  HeadlessImGui imgui;
  Dashboard dashboard(std::move(replay));
  frames_until(imgui, dashboard, [] { return true; });
  EXPECT_GT(dashboard.store().event_count(), 0u);
}

// What a shell hands `fsdplab view` beside a good trace: a directory, a FIFO nobody writes (reading it
// would block forever), a device that never ends, a small file claiming 10^9 ranks (memory per rank)
// and one whose last step is numbered 2^31-2 (steps indexed by number, a step axis in int). Each costs
// only itself, in bounded time and memory; the good files load and every panel draws.
TEST_F(Replayed, OddFilesCostOnlyThemselvesAndTheGoodOnesStillLoad) {
  const std::string good = export_run(false, "good.json");
  fs::create_directories(path("folder.json"));
  ASSERT_EQ(::mkfifo(path("fifo.json").c_str(), 0600), 0);
  std::ifstream in(good);
  const nlohmann::json valid = nlohmann::json::parse(in);
  nlohmann::json wide = valid;
  wide["distributedInfo"]["world_size"] = 1'000'000'000;
  spit(path("wide.json"), wide.dump());
  nlohmann::json late = valid;
  constexpr int kLateStep = 2'147'483'646;
  for (nlohmann::json& e : late["traceEvents"])
    if (e["ph"] == "X" && e["args"]["step"] == 2) e["args"]["step"] = kLateStep;
  spit(path("late.json"), late.dump());

  Replay replay = load_replay({path("folder.json"), path("fifo.json"), "/dev/zero", path("wide.json"), good,
                               path("late.json")});
  ASSERT_EQ(replay.errors.size(), 4u);
  EXPECT_NE(replay.errors[0].find("folder.json' is a folder; expected trace files (its traces: fsdplab view "),
            std::string::npos)
      << replay.errors[0];  // --trace-dir's folder, whose files the shell lists
  EXPECT_NE(replay.errors[1].find("fifo.json': it is a FIFO"), std::string::npos) << replay.errors[1];
  EXPECT_NE(replay.errors[2].find("'/dev/zero': it is a character device"), std::string::npos) << replay.errors[2];
  EXPECT_NE(replay.errors[3].find("wide.json"), std::string::npos) << replay.errors[3];
  EXPECT_NE(replay.errors[3].find("'world_size' = 1000000000; expected 1 to 1024"), std::string::npos)
      << replay.errors[3];
  ASSERT_EQ(replay.files, (std::vector<std::string>{good, path("late.json")}));
  const TraceSource& late_source = replay.store.source(1);
  ASSERT_EQ(late_source.steps.size(), 3u);
  EXPECT_EQ(late_source.steps.back().step, kLateStep);
  EXPECT_EQ(late_source.memory.size(), 2u);

  HeadlessImGui imgui;
  Dashboard dashboard(std::move(replay));
  frames_until(imgui, dashboard, [] { return true; });
  EXPECT_EQ(dashboard.step_times().points().size(), 6u);
}

// Random values put into a valid trace reach every field check; whatever loads must also draw.
TEST_F(Replayed, FuzzedFilesLoadOrFailCleanlyAndWhatLoadsDraws) {
  const std::string good = export_run(false, "seed.json");
  std::ifstream in(good);
  const nlohmann::json valid = nlohmann::json::parse(in);
  std::mt19937 rng(7);
  const auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  const std::vector<nlohmann::json> values = {nullptr, -1, 0, 1, 3, 1e15, -0.5, "", "X", "C", "sync",
                                              nlohmann::json::array(), nlohmann::json::object(), 2147483647};
  HeadlessImGui imgui;
  int loaded = 0, refused = 0;
  for (int iteration = 0; iteration < 60; ++iteration) {
    nlohmann::json doc = valid;
    for (std::size_t edits = 1 + pick(3); edits > 0; --edits) {
      nlohmann::json* target = &doc;
      const nlohmann::json& events = doc["traceEvents"];
      if (pick(3) != 0 && events.is_array() && !events.empty()) {
        nlohmann::json& e = doc["traceEvents"][pick(events.size())];
        target = &e;
        if (e.is_object() && e.contains("args") && pick(2) == 0) target = &e["args"];
      }
      if (!target->is_object() || target->empty()) continue;
      auto it = target->begin();
      std::advance(it, static_cast<long>(pick(target->size())));
      *it = values[pick(values.size())];
    }
    spit(path("fuzz.json"), doc.dump());
    Replay replay = load_replay({path("fuzz.json")});
    (replay.errors.empty() ? loaded : refused)++;
    for (const std::string& e : replay.errors) EXPECT_NE(e.find("fuzz.json"), std::string::npos) << e;
    Dashboard dashboard(std::move(replay));
    frames_until(imgui, dashboard, [] { return true; });
  }
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace fsdplab::app
