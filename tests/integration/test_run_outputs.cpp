// A run's outputs and a diverged run: every output path and number is checked before the first step, an
// output that fails at the end costs only itself, and a run whose loss is not finite stops, naming the
// step, without replacing a good checkpoint or saving a diverged model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "engine/nn/safetensors.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/trainer.hpp"
#include "labs/student_tasks.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_of;

class RunOutputs : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    std::ofstream(path("plain")) << "a file, not a folder\n";
  }
  // As RunConfig holds them: strings.
  std::string path(const std::string& name) const { return TempDirTest::path(name).string(); }

  static RunConfig toy(int steps) {
    RunConfig run;
    run.model = "toy";
    run.steps = steps;
    return run;
  }
  static FsdpRun fsdp_toy(int steps) {
    FsdpRun fsdp;
    fsdp.run = toy(steps);
    fsdp.run.world = 2;
    return fsdp;
  }
  // The steps train_fsdp / train_baseline ran before they threw (or returned): the checks must come first.
  int steps_run = 0;
  std::function<void(const StepReport&)> count_steps() {
    return [this](const StepReport&) { ++steps_run; };
  }
};

TEST_F(RunOutputs, UnusableOutputIsRefusedBeforeTheFirstStep) {
  struct Bad {
    std::string option;
    std::function<void(RunConfig&)> set;
    std::string message;
  };
  const std::vector<Bad> cases = {
      {"--save-final", [&](RunConfig& r) { r.save_final = path("plain/final"); }, "is not a folder"},
      {"--save-init", [&](RunConfig& r) { r.save_init = path("plain"); }, "is not a folder"},
      {"--trace-dir", [&](RunConfig& r) { r.trace_dir = path("plain/traces"); }, "is not a folder"},
      {"--losses", [&](RunConfig& r) { r.losses_file = path("no/such/losses.csv"); }, "does not exist"},
      {"--trace", [&](RunConfig& r) { r.trace_file = dir().string(); }, "is a folder; expected a file"},
  };
  for (const Bad& bad : cases) {
    SCOPED_TRACE(bad.option);
    steps_run = 0;
    RunConfig run = toy(3);
    bad.set(run);
    const std::string baseline =
        error_of([&] { train_baseline(run, PresetCatalog::builtin(), count_steps(), nullptr); });
    EXPECT_TRUE(contains(baseline, bad.option + " '")) << baseline;
    EXPECT_TRUE(contains(baseline, bad.message)) << baseline;
    FsdpRun fsdp = fsdp_toy(3);
    bad.set(fsdp.run);
    const std::string sharded = error_of([&] { train_fsdp(fsdp, PresetCatalog::builtin(), count_steps()); });
    EXPECT_TRUE(contains(sharded, bad.option + " '")) << sharded;
    EXPECT_EQ(steps_run, 0);
  }
}

TEST_F(RunOutputs, OutputInTheRunsOwnCheckpointIsRefused) {
  FsdpRun fsdp = fsdp_toy(2);
  fsdp.run.checkpoint_dir = path("ck");
  fsdp.run.losses_file = path("ck/manifest.json");
  const std::string error = error_of([&] { train_fsdp(fsdp, PresetCatalog::builtin(), count_steps()); });
  EXPECT_TRUE(contains(error, "--losses '" + path("ck/manifest.json") + "' lies in --checkpoint '" + path("ck") +
                                  "', a folder the run writes; expected a path outside it"))
      << error;
  EXPECT_EQ(steps_run, 0);
  fsdp.run.losses_file.clear();
  fsdp.run.save_final = path("ck");
  const std::string same = error_of([&] { train_fsdp(fsdp, PresetCatalog::builtin(), nullptr); });
  EXPECT_TRUE(contains(same, "--save-final '" + path("ck/model.safetensors") + "' lies in --checkpoint '" + path("ck")))
      << same;
}

// An output named as an input destroyed it, and the run exited 0; two outputs alike overwrote each other. The
// checks before the first step refuse both, naming the two options (check_paths_apart, output_file.hpp).
TEST_F(RunOutputs, AnOutputThatIsAnInputOrAnotherOutputIsRefusedBeforeTheFirstStep) {
  std::ofstream(path("presets.json")) << "{}";
  fs::create_directories(path("init"));
  struct Bad {
    std::function<void(RunConfig&)> set;
    std::string message;
  };
  const std::vector<Bad> cases = {
      {[&](RunConfig& r) { r.presets_file = r.trace_file = path("presets.json"); },
       "--trace '" + path("presets.json") + "' is the same file as --presets"},
      {[&](RunConfig& r) {
         r.load_init = path("init");
         r.losses_file = path("init/config.json");
       },
       "--losses '" + path("init/config.json") + "' is the same file as --load-init"},
      {[&](RunConfig& r) { r.losses_file = r.trace_file = path("x.csv"); }, "another output of the run"},
      {[&](RunConfig& r) {
         r.trace_dir = path("tdx");
         r.trace_file = path("tdx/rank0.json");
       },
       "--trace '" + path("tdx/rank0.json") + "' is the same file as --trace-dir"},
      {[&](RunConfig& r) { r.save_init = r.save_final = path("same"); },
       "--save-init '" + path("same/model.safetensors") + "' is the same file as --save-final"},
  };
  for (const Bad& bad : cases) {
    SCOPED_TRACE(bad.message);
    steps_run = 0;
    RunConfig run = toy(2);
    bad.set(run);
    const std::string baseline =
        error_of([&] { train_baseline(run, PresetCatalog::builtin(), count_steps(), nullptr); });
    EXPECT_TRUE(contains(baseline, bad.message)) << baseline;
    FsdpRun fsdp = fsdp_toy(2);
    bad.set(fsdp.run);
    const std::string sharded = error_of([&] { train_fsdp(fsdp, PresetCatalog::builtin(), count_steps()); });
    EXPECT_TRUE(contains(sharded, bad.message)) << sharded;
    EXPECT_EQ(steps_run, 0);
  }
  EXPECT_EQ(slurp(path("presets.json")), "{}");
  // Paths that only share a folder are apart: a folder the run adds files to is checked by those files.
  fs::create_directories(path("out"));
  FsdpRun shared = fsdp_toy(2);
  shared.run.trace_dir = shared.run.save_final = path("out");
  shared.run.losses_file = path("out/losses.csv");
  EXPECT_EQ(train_fsdp(shared, PresetCatalog::builtin(), nullptr).size(), 2u);
  EXPECT_TRUE(fs::exists(path("out/model.safetensors")));
  // --resume may be --checkpoint's own folder, written to by the name it was read by or another.
  FsdpRun first = fsdp_toy(1);
  first.run.checkpoint_dir = path("ck");
  train_fsdp(first, PresetCatalog::builtin(), nullptr);
  FsdpRun resumed = fsdp_toy(2);
  resumed.run.resume_dir = path("ck");
  resumed.run.checkpoint_dir = path("init/../ck");
  EXPECT_EQ(train_fsdp(resumed, PresetCatalog::builtin(), nullptr).size(), 1u);
}

TEST_F(RunOutputs, SaveThatFailsAtTheEndCostsOnlyItself) {
  // The folder is fine when the run starts; a file takes its place while the run trains.
  std::vector<std::string> failed;
  for (const bool sharded : {false, true}) {
    SCOPED_TRACE(sharded ? "fsdp" : "baseline");
    failed.clear();
    const std::string final_dir = path(sharded ? "final_fsdp" : "final_baseline");
    const auto block_the_folder = [&](const StepReport&) { std::ofstream(final_dir) << "in the way\n"; };
    const OutputFailed on_failed = [&](const std::string& message) { failed.push_back(message); };
    std::vector<StepReport> steps;
    if (sharded) {
      FsdpRun fsdp = fsdp_toy(3);
      fsdp.run.save_final = final_dir;
      fsdp.on_output_failed = on_failed;
      steps = train_fsdp(fsdp, PresetCatalog::builtin(), block_the_folder);
    } else {
      RunConfig run = toy(3);
      run.save_final = final_dir;
      steps = train_baseline(run, PresetCatalog::builtin(), block_the_folder, nullptr, on_failed);
    }
    EXPECT_EQ(steps.size(), 3u);
    ASSERT_EQ(failed.size(), 1u);
    EXPECT_TRUE(contains(failed[0], final_dir)) << failed[0];
  }
  // Without a place to report it, the failure is the run's Error, as before.
  RunConfig run = toy(1);
  run.save_final = path("final_plain");
  EXPECT_THROW(train_baseline(run, PresetCatalog::builtin(),
                              [&](const StepReport&) { std::ofstream(run.save_final) << "in the way\n"; }, nullptr),
               Error);
}

TEST_F(RunOutputs, NonFiniteNumbersAreRefusedBeforeTheFirstStep) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const double lr : {nan, inf, -1.0}) {
    RunConfig run = toy(2);
    run.lr = lr;
    EXPECT_TRUE(contains(error_of([&] { train_baseline(run, PresetCatalog::builtin(), count_steps(), nullptr); }),
                         "--lr "));
    FsdpRun fsdp = fsdp_toy(2);
    fsdp.run.lr = lr;
    EXPECT_TRUE(contains(error_of([&] { train_fsdp(fsdp, PresetCatalog::builtin(), count_steps()); }),
                         "expected a finite learning rate >= 0"));
  }
  RunConfig run = toy(2);
  run.optimizer = "sgd";
  run.momentum = nan;
  EXPECT_TRUE(contains(error_of([&] { train_baseline(run, PresetCatalog::builtin(), count_steps(), nullptr); }),
                       "--momentum nan; expected a finite momentum >= 0"));
  EXPECT_EQ(steps_run, 0);
}

// Parameters that are copies of the flat buffer never see what the ranks gather: NaN from step 1 at a learning rate
// that trains the reference. The task is named as the first suspect, and the NaN as "nan", whatever its sign bit.
TEST_F(RunOutputs, ADivergedRunWithATaskOfImplSuspectsThatTaskFirst) {
  FsdpRun fsdp;
  fsdp.run.model = "gpt2";
  fsdp.run.preset = "test-tiny";
  fsdp.run.world = 2;
  fsdp.run.steps = 2;
  fsdp.tasks = tasks_for(parse_impl("2=mutant:views-that-copy"));
  const std::string e = error_of([&] { train_fsdp(fsdp, PresetCatalog::builtin(), nullptr); });
  EXPECT_TRUE(contains(e,
                       "step 1 of 2: the loss is nan; the training diverged (an FSDP task of --impl that does not "
                       "keep its contract, a learning rate of 0.001"))
      << e;
}

TEST_F(RunOutputs, DivergedRunStopsAtTheStepAndSavesNothing) {
  RunConfig run = toy(20);
  run.lr = 1e30;
  run.save_final = path("final");
  const std::string baseline = error_of([&] { train_baseline(run, PresetCatalog::builtin(), count_steps(), nullptr); });
  EXPECT_TRUE(contains(baseline, "step " + std::to_string(steps_run) + " of 20: the loss is ")) << baseline;
  EXPECT_TRUE(contains(baseline, "--allow-nonfinite")) << baseline;
  EXPECT_LT(steps_run, 20);
  EXPECT_FALSE(fs::exists(path("final")));

  FsdpRun fsdp = fsdp_toy(20);
  fsdp.run.lr = 1e30;
  fsdp.run.save_final = path("final");
  const std::string sharded = error_of([&] { train_fsdp(fsdp, PresetCatalog::builtin(), nullptr); });
  EXPECT_TRUE(contains(sharded, " of 20: the loss is ")) << sharded;
  EXPECT_FALSE(contains(sharded, "--impl")) << sharded;  // the reference's tasks are no suspect
  EXPECT_FALSE(fs::exists(path("final")));

  // --allow-nonfinite trains on, but a diverged model is still never saved.
  run.allow_nonfinite = true;
  std::vector<std::string> failed;
  const std::vector<StepReport> steps = train_baseline(run, PresetCatalog::builtin(), nullptr, nullptr,
                                                       [&](const std::string& m) { failed.push_back(m); });
  EXPECT_EQ(steps.size(), 20u);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_TRUE(contains(failed[0], "expected finite values (the training diverged)")) << failed[0];
  EXPECT_FALSE(fs::exists(path("final/model.safetensors")));
}

TEST_F(RunOutputs, DivergedStateNeverReplacesAGoodCheckpoint) {
  FsdpRun good = fsdp_toy(2);
  good.run.checkpoint_dir = path("ck");
  train_fsdp(good, PresetCatalog::builtin(), nullptr);
  ASSERT_TRUE(fs::exists(path("ck/manifest.json")));

  FsdpRun diverging = fsdp_toy(20);
  diverging.run.lr = 1e30;
  diverging.run.allow_nonfinite = true;  // so that a non-finite state reaches the checkpoint
  diverging.run.checkpoint_dir = path("ck");
  diverging.run.checkpoint_every = 1;
  const std::string error = error_of([&] { train_fsdp(diverging, PresetCatalog::builtin(), nullptr); });
  EXPECT_TRUE(contains(error, "the previous checkpoint is left as it was")) << error;
  // Whatever checkpoint is in place now (the good one, or one of the diverging run's steps that was still
  // finite) holds finite values only.
  const SafetensorsFile model = SafetensorsFile::read(path("ck/model.safetensors"));
  for (const SafetensorsFile::Entry& e : model.entries()) {
    std::vector<float> values(e.bytes.size() / sizeof(float));
    std::memcpy(values.data(), e.bytes.data(), e.bytes.size());
    for (float v : values) ASSERT_TRUE(std::isfinite(v)) << e.name;
  }
}

}  // namespace
}  // namespace fsdplab
