// The single-rank baseline end to end: the loss falls on every model, the same run gives the same
// losses twice, a saved folder reads back bit for bit, and a folder from another model is refused.
// The training runs run on each device (names end in _sim, _cuda; cuda skips where there is no GPU):
// a rerun on the same device is bit for bit the same there too, every kernel's sums being in a fixed
// order.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "engine/nn/safetensors.hpp"
#include "engine/runtime/error.hpp"
#include "engine/train/trainer.hpp"
#include "run_on_each_device.hpp"

namespace fsdplab {
namespace {

using testing::device_param_name;
using testing::on_each_device;
using testing::RunOnEachDevice;
using testing::with_device_name;

std::vector<double> losses(const RunConfig& run) {
  std::vector<double> out;
  for (const StepReport& s : train_baseline(run, PresetCatalog::builtin(), nullptr, nullptr)) out.push_back(s.loss);
  return out;
}

double mean(const std::vector<double>& v, std::size_t begin, std::size_t end) {
  double s = 0;
  for (std::size_t i = begin; i < end; ++i) s += v[i];
  return s / static_cast<double>(end - begin);
}

struct Case {
  const char* model;
  int steps;
  double lr;
  double fall;  // the last fifth's mean loss must be below this fraction of the first fifth's
};

class BaselineLossFalls : public RunOnEachDevice<Case> {};

TEST_P(BaselineLossFalls, OnEveryModel) {
  RunConfig run = on_device({});
  run.model = param().model;
  run.steps = param().steps;
  run.lr = param().lr;
  run.batch = 16;
  if (run.model == "mlp") {  // its shape options are the mlp's alone
    run.mlp_width = 16;
    run.mlp_depth = 2;
  }
  const std::vector<double> l = losses(run);
  ASSERT_EQ(l.size(), static_cast<std::size_t>(run.steps));
  // Averages over the first and last fifth: single steps are noisy, the trend is not.
  const std::size_t fifth = l.size() / 5;
  EXPECT_LT(mean(l, l.size() - fifth, l.size()), param().fall * mean(l, 0, fifth)) << run.model;
}

INSTANTIATE_TEST_SUITE_P(Models, BaselineLossFalls,
                         // gpt2 test-tiny starts at ln 64 = 4.16 and must first learn to copy the token one period back
                         // (synthetic_data.hpp); in 100 steps it gets about 17% of the way down.
                         on_each_device(std::vector<Case>{
                             {"toy", 100, 1e-2, 0.8}, {"mlp", 60, 3e-3, 0.8}, {"gpt2", 100, 1e-2, 0.9}}),
                         with_device_name<Case>([](const Case& c) { return std::string(c.model); }));

class BaselineRun : public RunOnEachDevice<> {};

TEST_P(BaselineRun, SameRunSameLosses) {
  RunConfig run = on_device({});
  run.model = "mlp";
  run.mlp_width = 8;
  run.steps = 5;
  EXPECT_EQ(losses(run), losses(run));
}

TEST_P(BaselineRun, SavedFolderReadsBackBitExactlyAndResumesTheSameRun) {
  const auto dir = std::filesystem::temp_directory_path() / ("fsdplab_baseline_test_" + device_name());
  std::filesystem::remove_all(dir);
  RunConfig run = on_device({});
  run.model = "gpt2";
  run.steps = 3;
  run.seed = 11;
  run.save_init = (dir / "init").string();
  run.save_final = (dir / "final").string();
  const std::vector<double> first = losses(run);

  // Loading the saved initial parameters under another seed gives the same run.
  RunConfig again = run;
  again.seed = 11;  // the data stream is seeded too; only the parameters come from the folder
  again.save_init.clear();
  again.load_init = (dir / "init").string();
  again.save_final = (dir / "final2").string();
  EXPECT_EQ(losses(again), first);
  const SafetensorsFile a = SafetensorsFile::read(dir / "final" / "model.safetensors");
  const SafetensorsFile b = SafetensorsFile::read(dir / "final2" / "model.safetensors");
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& name : a.names()) {
    const auto x = a.at(name).bytes, y = b.at(name).bytes;
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end())) << name;
  }
  // The tied LM head is stored once, as the token embedding.
  EXPECT_TRUE(a.contains("transformer.wte.weight"));
  EXPECT_FALSE(a.contains("lm_head.weight"));
  std::filesystem::remove_all(dir);
}

// bf16 mixed precision (RunConfig::baseline_precision): a rerun is bit for bit the same, it computes
// otherwise than f32, and --save-final writes the f32 master weights, not their bf16 copies.
TEST_P(BaselineRun, MixedPrecisionRerunsBitExactlyAndSavesTheF32Masters) {
  const auto dir = std::filesystem::temp_directory_path() / ("fsdplab_baseline_bf16_" + device_name());
  std::filesystem::remove_all(dir);
  RunConfig run = on_device({});
  run.model = "gpt2";
  run.steps = 3;
  const std::vector<double> f32 = losses(run);
  run.baseline_precision = DType::bf16;
  run.save_final = (dir / "first").string();
  const std::vector<double> first = losses(run);
  run.save_final = (dir / "again").string();
  EXPECT_EQ(losses(run), first);
  EXPECT_NE(first, f32) << "bf16 compute left no trace: was it f32 after all?";
  const SafetensorsFile a = SafetensorsFile::read(dir / "first" / "model.safetensors");
  const SafetensorsFile b = SafetensorsFile::read(dir / "again" / "model.safetensors");
  ASSERT_EQ(a.names(), b.names());
  std::size_t below_bf16 = 0;  // elements whose low 16 bits are set: an f32 value no bf16 copy could hold
  for (const std::string& name : a.names()) {
    EXPECT_EQ(a.at(name).dtype, "F32") << name;
    const auto x = a.at(name).bytes, y = b.at(name).bytes;
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end())) << name;
    for (std::size_t i = 0; i + 4 <= x.size(); i += 4) below_bf16 += (x[i] != std::byte{0} || x[i + 1] != std::byte{0});
  }
  EXPECT_GT(below_bf16, 0u) << "the saved weights are bf16 values: the copies were saved, not the masters";
  std::filesystem::remove_all(dir);
}

TEST_P(BaselineRun, AFolderSavedByHuggingFaceLoadsExactly) {
  // Written by GPT2LMHeadModel.save_pretrained (tests/reference/make_hf_fixture.py): its config.json
  // omits keys at their defaults and adds its own, its tied head is not stored.
  // Also into a model that stores the vocabulary padded ([Note: the padded vocabulary]): 64 rows in the
  // file, 128 in memory, 64 written back.
  const std::filesystem::path fixture = std::filesystem::path(__FILE__).parent_path() / "../data/hf_gpt2_tiny";
  for (const std::int64_t vocab_multiple : {0, 128}) {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("fsdplab_baseline_hf_" + device_name() + "_" + std::to_string(vocab_multiple));
    std::filesystem::remove_all(dir);
    RunConfig run = on_device({});
    run.model = "gpt2";
    run.preset = "test-tiny";
    run.vocab_multiple = vocab_multiple;
    run.steps = 0;
    run.load_init = fixture.string();
    run.save_init = dir.string();  // written after the load: what fsdplab holds
    losses(run);
    const SafetensorsFile theirs = SafetensorsFile::read(fixture / "model.safetensors");
    const SafetensorsFile ours = SafetensorsFile::read(dir / "model.safetensors");
    EXPECT_EQ(ours.names().size(), theirs.names().size());
    for (const std::string& name : theirs.names()) {
      EXPECT_EQ(ours.at(name).shape, theirs.at(name).shape) << name << ", vocab_multiple " << vocab_multiple;
      const auto x = theirs.at(name).bytes, y = ours.at(name).bytes;
      EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end())) << name << ", vocab_multiple " << vocab_multiple;
    }
    std::filesystem::remove_all(dir);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, BaselineRun, on_each_device(), device_param_name);

// Step 1's ops by phase and name, as a trace sink sees them.
class StepOps final : public TraceSink {
 public:
  void on_event(const TraceEvent& e) override {
    if (e.step == 1 && e.op != 0) ++count[e.phase + " " + e.name];
  }
  void on_counter(const CounterSample&) override {}
  std::map<std::string, int> count;
};

// The baseline keeps its parameters flat (baseline_parameters.hpp): a step zeroes every gradient in one op
// and updates every parameter in one, where an op per parameter would be a launch each on a GPU; in bf16 it
// adds one cast to the copies and one widening back. The model's own forward issues no fill.
TEST(Baseline, AStepZeroesAndUpdatesEveryParameterInOneOpEach) {
  for (DType precision : {DType::f32, DType::bf16}) {
    RunConfig run;
    run.model = "gpt2";
    run.steps = 2;
    run.baseline_precision = precision;
    StepOps ops;
    train_baseline(run, PresetCatalog::builtin(), nullptr, &ops);
    const int casts = precision == DType::f32 ? 0 : 1;
    EXPECT_EQ(ops.count["forward fill"], 1) << dtype_name(precision);
    EXPECT_EQ(ops.count["forward cast"], casts) << dtype_name(precision);
    EXPECT_EQ(ops.count["backward cast"], casts) << dtype_name(precision);
    int optimizer_ops = 0;
    for (const auto& [key, n] : ops.count) optimizer_ops += key.starts_with("optimizer ") ? n : 0;
    EXPECT_EQ(optimizer_ops, 1) << dtype_name(precision);
    EXPECT_EQ(ops.count["optimizer adamw_update"], 1) << dtype_name(precision);
  }
}

TEST(Baseline, AFolderFromAnotherModelIsAClearError) {
  const auto dir = std::filesystem::temp_directory_path() / "fsdplab_baseline_other";
  std::filesystem::remove_all(dir);
  RunConfig toy;
  toy.model = "toy";
  toy.steps = 0;
  toy.save_init = dir.string();
  losses(toy);
  RunConfig mlp;
  mlp.model = "mlp";
  mlp.steps = 1;
  mlp.load_init = dir.string();
  try {
    losses(mlp);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds a toy model; this run's model is mlp (--model)"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Baseline, TrainsOnATokenFile) {
  // A uint16 token file in the nanoGPT / llm.c convention: a repeating sequence gpt2 can learn.
  const auto path = std::filesystem::temp_directory_path() / "fsdplab_baseline_tokens.bin";
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 4096; ++i) {
      const std::uint16_t token = static_cast<std::uint16_t>((i * 5) % 61);
      out.write(reinterpret_cast<const char*>(&token), sizeof token);
    }
  }
  RunConfig run;
  run.model = "gpt2";
  run.steps = 40;
  run.lr = 1e-2;
  run.data_file = path.string();
  const std::vector<double> l = losses(run);
  EXPECT_LT(mean(l, 32, 40), 0.5 * mean(l, 0, 8));
  run.preset = "test-tiny";
  run.batch = 1024;  // needs more tokens than the file holds
  EXPECT_THROW(losses(run), Error);
  std::filesystem::remove(path);
}

TEST(Baseline, ImpossibleConfigurationsFailBeforeTraining) {
  RunConfig run;
  run.model = "gpt2";
  run.seq = 10'000;  // longer than test-tiny's position table
  EXPECT_THROW(losses(run), Error);
  run = RunConfig{};
  run.model = "gpt2";
  run.preset = "gpt5";
  EXPECT_THROW(losses(run), Error);
  run = RunConfig{};
  run.optimizer = "lion";
  EXPECT_THROW(losses(run), Error);
  run = RunConfig{};
  run.model = "mlp";
  run.baseline_precision = DType::bf16;  // its regression inputs are f32
  try {
    losses(run);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--precision bf16 with --model mlp"), std::string::npos) << e.what();
  }
  run = RunConfig{};
  run.model = "llama";
  run.vocab_multiple = 256;
  try {
    losses(run);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--vocab-multiple 256 for --model llama: only --model gpt2 pads"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fsdplab
