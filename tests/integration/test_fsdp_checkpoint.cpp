// Training checkpoints (engine/train/training_checkpoint.hpp): a run stopped after 3 steps and resumed
// to 6 gives bit for bit the losses and final parameters of 6 uninterrupted steps, for AdamW and SGD
// with momentum, sharded, hybrid and ZeRO, f32 and bf16; writing checkpoints does not change a run;
// the full model in a checkpoint is --save-final's folder byte for byte; and every way a checkpoint
// can be wrong (a flipped byte, a missing file, another world size, model, strategy or optimizer) is an
// Error naming what was expected and what was found, while a failed save leaves the previous
// checkpoint as it was; with --reshard, a run at another world size, strategy or wrap continues it, the
// state moved by parameter.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/nn/safetensors.hpp"
#include "engine/train/checkpoint_lock.hpp"
#include "engine/train/crc32.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/model_factory.hpp"
#include "engine/train/trainer.hpp"
#include "engine/train/training_checkpoint.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_of;

constexpr int kSteps = 6;
constexpr int kStop = 3;

struct Case {
  std::string name;
  int world = 2;
  ShardingStrategy strategy = ShardingStrategy::full_shard;
  int hybrid_group = 0;
  std::string optimizer = "adamw";
  double lr = 1e-2;
  double momentum = 0;
  DType param_dtype = DType::f32;
  int accumulate = 1;
  std::string wrap = "block";
  bool offload = false;
  double clip_grad_norm = 0;
};

std::ostream& operator<<(std::ostream& out, const Case& c) { return out << c.name; }

FsdpRun make_run(const Case& c, int steps) {
  FsdpRun fsdp;
  RunConfig& run = fsdp.run;
  run.model = "gpt2";
  run.preset = "test-tiny";
  run.world = c.world;
  run.steps = steps;
  run.batch = 12;  // divisible by 1, 2, 3 and 4
  run.seq = 16;
  run.optimizer = c.optimizer;
  run.lr = c.lr;
  run.momentum = c.momentum;
  run.accumulate = c.accumulate;
  run.wrap = c.wrap;
  run.clip_grad_norm = c.clip_grad_norm;
  fsdp.options.strategy = c.strategy;
  fsdp.options.hybrid_group = c.hybrid_group;
  fsdp.options.param_dtype = c.param_dtype;
  fsdp.options.offload = c.offload;
  return fsdp;
}

std::vector<double> train(const FsdpRun& fsdp) {
  std::vector<double> losses;
  for (const StepReport& s : train_fsdp(fsdp, PresetCatalog::builtin(), nullptr)) losses.push_back(s.loss);
  return losses;
}

std::vector<std::uint64_t> bits(const std::vector<double>& values) {
  std::vector<std::uint64_t> out;
  for (double v : values) out.push_back(std::bit_cast<std::uint64_t>(v));
  return out;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every file of a folder, by name, with its bytes.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    files[e.path().filename().string()] = read_bytes(e.path());
  return files;
}

// Names beside `dir` that a save stages in (DIR.tmp-<pid>) or moves the previous checkpoint to. The lock file
// (DIR.fsdplab-lock, checkpoint_lock.hpp) stays by design: the kernel, not the file, holds the lock.
std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir.parent_path())) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(dir.filename().string() + ".") && e.path() != CheckpointLock::lock_file(dir))
      names.push_back(name);
  }
  return names;
}

class FsdpCheckpoint : public testing::TempDirTest {};

class FsdpCheckpointResume : public FsdpCheckpoint, public ::testing::WithParamInterface<Case> {};

// The uninterrupted run against: 3 steps writing a checkpoint, then a second run resuming from it up to
// 6 steps, checkpointing into the same folder. Losses are compared as bits, parameters as file bytes.
TEST_P(FsdpCheckpointResume, StopAndResumeIsBitIdenticalToOneRun) {
  const Case& c = GetParam();
  FsdpRun whole = make_run(c, kSteps);
  whole.run.save_final = path("whole_final").string();
  const std::vector<double> expected = train(whole);
  ASSERT_EQ(expected.size(), static_cast<std::size_t>(kSteps));

  FsdpRun first = make_run(c, kStop);
  first.run.checkpoint_dir = path("ckpt").string();
  first.run.save_final = path("first_final").string();
  const std::vector<double> before = train(first);
  FsdpRun second = make_run(c, kSteps);
  second.run.resume_dir = path("ckpt").string();
  second.run.checkpoint_dir = path("ckpt").string();  // resume from a folder and keep checkpointing into it
  second.run.save_final = path("second_final").string();
  std::vector<double> after = train(second);
  ASSERT_EQ(after.size(), static_cast<std::size_t>(kSteps - kStop));

  std::vector<double> resumed = before;
  resumed.insert(resumed.end(), after.begin(), after.end());
  EXPECT_EQ(bits(resumed), bits(expected));
  EXPECT_TRUE(slurp(path("second_final") / "model.safetensors") == slurp(path("whole_final") / "model.safetensors"))
      << "the resumed run's final parameters differ from the uninterrupted run's";
  // The full model in a checkpoint is what --save-final writes at that step, byte for byte; the folder
  // now holds step 6 (the resumed run's own checkpoint replaced the one it resumed from).
  EXPECT_TRUE(slurp(path("ckpt") / "model.safetensors") == slurp(path("whole_final") / "model.safetensors"));
  EXPECT_TRUE(slurp(path("ckpt") / "config.json") == slurp(path("whole_final") / "config.json"));
  EXPECT_TRUE(contains(slurp(path("ckpt") / "manifest.json"), "\"step\": 6"));
  EXPECT_TRUE(leftovers(path("ckpt")).empty());
}

INSTANTIATE_TEST_SUITE_P(
    Runs, FsdpCheckpointResume,
    ::testing::Values(Case{.name = "full_w2_adamw"},
                      Case{.name = "full_w2_sgd_momentum", .optimizer = "sgd", .lr = 0.05, .momentum = 0.9},
                      Case{.name = "zero2_w3_adamw", .world = 3, .strategy = ShardingStrategy::zero2},
                      Case{.name = "hybrid_w4_s2_sgd_momentum",
                           .world = 4,
                           .strategy = ShardingStrategy::hybrid_shard,
                           .hybrid_group = 2,
                           .optimizer = "sgd",
                           .lr = 0.05,
                           .momentum = 0.9},
                      Case{.name = "full_w1_adamw", .world = 1},
                      Case{.name = "full_w2_bf16_adamw", .param_dtype = DType::bf16},
                      Case{.name = "grad_op_w2_accumulate2_nested_adamw",
                           .strategy = ShardingStrategy::shard_grad_op,
                           .accumulate = 2,
                           .wrap = "nested"},
                      Case{.name = "full_w3_offload_clipped_sgd",
                           .world = 3,
                           .optimizer = "sgd",
                           .lr = 0.05,
                           .offload = true,
                           .clip_grad_norm = 0.5}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// Checkpointing every 2 steps leaves the run as it is: its losses, its steps' virtual times (no device op)
// and every rank's ledger peaks (no device memory); the last checkpoint is step 6.
TEST_F(FsdpCheckpoint, WritingCheckpointsDoesNotChangeTheRun) {
  struct Seen {
    std::vector<StepReport> steps;
    std::vector<TagBytes> peaks = std::vector<TagBytes>(2);
  };
  const auto run = [](FsdpRun fsdp) {
    Seen seen;
    fsdp.on_rank_done = [&](int rank, Device& device) {
      seen.peaks[static_cast<std::size_t>(rank)] = device.ledger().peak_by_tag();
    };
    seen.steps = train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
    return seen;
  };
  const Seen plain = run(make_run(Case{}, kSteps));
  FsdpRun with = make_run(Case{}, kSteps);
  with.run.checkpoint_dir = path("ckpt").string();
  with.run.checkpoint_every = 2;
  std::vector<int> saved_after;
  with.on_checkpoint_written = [&](int rank, int step) {
    if (rank == 0) saved_after.push_back(step);
  };
  const Seen checkpointed = run(with);
  ASSERT_EQ(checkpointed.steps.size(), plain.steps.size());
  for (std::size_t i = 0; i < plain.steps.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint64_t>(checkpointed.steps[i].loss),
              std::bit_cast<std::uint64_t>(plain.steps[i].loss));
    EXPECT_EQ(checkpointed.steps[i].begin, plain.steps[i].begin) << "step " << i;
    EXPECT_EQ(checkpointed.steps[i].end, plain.steps[i].end) << "step " << i;
  }
  EXPECT_TRUE(checkpointed.peaks == plain.peaks);
  EXPECT_EQ(saved_after, (std::vector<int>{2, 4, 6}));
  EXPECT_TRUE(contains(slurp(path("ckpt") / "manifest.json"), "\"step\": 6"));
}

// Each rank's file holds its master shard of every unit and its optimizer state beside it.
TEST_F(FsdpCheckpoint, RankFilesHoldShardsAndOptimizerState) {
  FsdpRun run = make_run(Case{}, 2);
  run.run.checkpoint_dir = path("ckpt").string();
  train(run);
  for (int r = 0; r < 2; ++r) {
    const SafetensorsFile file = SafetensorsFile::read(path("ckpt") / ("rank" + std::to_string(r) + ".safetensors"));
    EXPECT_TRUE(file.contains("flat_param.(root)"));
    EXPECT_TRUE(file.contains("flat_param.transformer.h.1"));
    EXPECT_TRUE(file.contains("optim.transformer.h.0.exp_avg"));
    EXPECT_TRUE(file.contains("optim.transformer.h.0.exp_avg_sq"));
    EXPECT_EQ(file.entries().size(), 9u);  // 3 units x (shard, m, v)
    EXPECT_EQ(file.metadata().at("rank"), std::to_string(r));
    EXPECT_EQ(file.metadata().at("step"), "2");
    EXPECT_EQ(file.metadata().at("optimizer_steps"), "2");
  }
  // The full model is a --load-init folder: the baseline starts from it (its --save-init, written from the model it
  // loaded, is the checkpoint's model byte for byte; a fresh initialisation, two steps short, would differ).
  RunConfig baseline = make_run(Case{}, 1).run;
  baseline.world = 1;
  baseline.load_init = path("ckpt").string();
  baseline.save_init = path("baseline_init").string();
  EXPECT_EQ(train_baseline(baseline, PresetCatalog::builtin(), nullptr, nullptr).size(), 1u);
  EXPECT_TRUE(slurp(path("baseline_init") / "model.safetensors") == slurp(path("ckpt") / "model.safetensors"));
}

// A resume identifies its token file by size and CRC-32, not by path: the same tokens under another name
// resume; other tokens under the same name (one bit, the same size) are refused, saying what changed.
TEST_F(FsdpCheckpoint, AResumeKnowsItsDataByContentsNotByPath) {
  std::string tokens;
  for (int i = 0; i < 4096; ++i) {
    const auto token = static_cast<std::uint16_t>((i * 7) % 64);  // below test-tiny's vocabulary of 64
    tokens.append(reinterpret_cast<const char*>(&token), sizeof token);
  }
  spit(path("tokens.bin"), tokens);
  FsdpRun first = make_run(Case{}, kStop);
  first.run.data_file = path("tokens.bin").string();
  first.run.checkpoint_dir = path("ckpt").string();
  train(first);

  fs::copy_file(path("tokens.bin"), path("moved.bin"));
  FsdpRun moved = make_run(Case{}, kStop + 1);
  moved.run.data_file = path("moved.bin").string();
  moved.run.resume_dir = path("ckpt").string();
  EXPECT_EQ(train(moved).size(), 1u);

  tokens[10] = static_cast<char>(tokens[10] ^ 1);
  spit(path("tokens.bin"), tokens);
  FsdpRun changed = make_run(Case{}, kStop + 1);
  changed.run.data_file = path("tokens.bin").string();
  changed.run.resume_dir = path("ckpt").string();
  const std::string e = error_of([&] { train(changed); });
  EXPECT_TRUE(contains(e, "data.file.crc32 (--data: the file's contents changed): the checkpoint has \"")) << e;
}

// One run at a time writes a checkpoint folder: a second is refused before it trains, naming the first's
// process, and nothing is written.
TEST_F(FsdpCheckpoint, ASecondRunOnTheSameFolderIsRefusedNamingTheFirst) {
  const CheckpointLock first(path("ckpt"));
  FsdpRun second = make_run(Case{}, 1);
  second.run.checkpoint_dir = path("ckpt").string();
  const std::string e = error_of([&] { train(second); });
  EXPECT_TRUE(contains(e, "--checkpoint '" + path("ckpt").string() + "': another run (process " +
                              std::to_string(::getpid()) + ") is writing checkpoints there"))
      << e;
  EXPECT_FALSE(fs::exists(path("ckpt")));
}

// A checkpoint of 3 steps of Case{} in path("ckpt"), and the run that resumes it to 6 steps.
class FsdpCheckpointErrors : public FsdpCheckpoint {
 protected:
  void SetUp() override {
    FsdpCheckpoint::SetUp();
    FsdpRun first = make_run(Case{}, kStop);
    first.run.checkpoint_dir = path("ckpt").string();
    train(first);
  }
  FsdpRun resume(const Case& c = Case{}) {
    FsdpRun run = make_run(c, kSteps);
    run.run.resume_dir = path("ckpt").string();
    return run;
  }
  std::string resume_error(const FsdpRun& run) {
    return error_of([&] { train(run); });
  }
  nlohmann::json manifest() { return nlohmann::json::parse(slurp(path("ckpt") / "manifest.json")); }
  // The manifest replaced by `edited`, its checksum made again, as by a hand that knows the format.
  void rewrite_manifest(nlohmann::json edited) {
    edited.erase("manifest_crc32");
    const std::string text = edited.dump();
    edited["manifest_crc32"] = crc32_hex(crc32(std::as_bytes(std::span<const char>(text.data(), text.size()))));
    spit(path("ckpt") / "manifest.json", edited.dump(2));
  }
  void flip_a_byte(const std::string& name, std::size_t at) {
    std::string bytes = slurp(path("ckpt") / name);
    ASSERT_LT(at, bytes.size());
    bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
    spit(path("ckpt") / name, bytes);
  }
};

TEST_F(FsdpCheckpointErrors, AFlippedByteIsNamedWithBothChecksums) {
  const std::string bytes = slurp(path("ckpt") / "rank1.safetensors");
  flip_a_byte("rank1.safetensors", bytes.size() - 100);  // in a tensor's data: still a valid safetensors file
  const std::string e = resume_error(resume());
  EXPECT_TRUE(contains(e, "rank1.safetensors' is corrupt: its CRC-32 is ")) << e;
  EXPECT_TRUE(contains(e, ", the manifest says ")) << e;
}

TEST_F(FsdpCheckpointErrors, AFlippedByteInTheManifestIsNamed) {
  const std::string text = slurp(path("ckpt") / "manifest.json");
  flip_a_byte("manifest.json", text.find("\"step\": 3") + 8);  // 3 -> #: JSON no longer
  EXPECT_TRUE(contains(resume_error(resume()), "manifest.json' is corrupt"));
  std::string edited = text;
  edited.replace(text.find("\"step\": 3"), 9, "\"step\": 2");  // still JSON, a different step
  spit(path("ckpt") / "manifest.json", edited);
  const std::string e = resume_error(resume());
  EXPECT_TRUE(contains(e, "manifest.json' is corrupt: its content has CRC-32 ")) << e;
}

// A manifest edited by hand, its checksum made again: an entry of the wrong shape is named, with what it should be.
TEST_F(FsdpCheckpointErrors, AFileEntryOfTheWrongTypeIsNamed) {
  const nlohmann::json saved = manifest();
  for (const nlohmann::json& bytes : {nlohmann::json("169128"), nlohmann::json(-1), nlohmann::json(1e30)}) {
    nlohmann::json edited = saved;
    edited["files"]["rank0.safetensors"]["bytes"] = bytes;
    rewrite_manifest(edited);
    const std::string e = resume_error(resume());
    EXPECT_TRUE(contains(e, "manifest.json' lists rank0.safetensors with bytes " + bytes.dump() + " and crc32 \""))
        << e;
    EXPECT_TRUE(contains(e, "; expected {\"bytes\": a whole number >= 0, \"crc32\": \"8 hex digits\"}")) << e;
  }
  // Left out, the field reads "none"; written as null, "null".
  for (const bool left_out : {true, false}) {
    nlohmann::json edited = saved;
    if (left_out) {
      edited["files"]["rank0.safetensors"].erase("crc32");
    } else {
      edited["files"]["rank0.safetensors"]["crc32"] = nullptr;
    }
    rewrite_manifest(edited);
    const std::string e = resume_error(resume());
    EXPECT_TRUE(contains(e, "lists rank0.safetensors with bytes " +
                                saved["files"]["rank0.safetensors"]["bytes"].dump() + " and crc32 " +
                                (left_out ? "none" : "null") + "; expected"))
        << e;
    EXPECT_FALSE(contains(e, "json.exception")) << e;
  }
}

TEST_F(FsdpCheckpointErrors, AMissingRankFileIsNamed) {
  fs::remove(path("ckpt") / "rank1.safetensors");
  const std::string e = resume_error(resume());
  EXPECT_TRUE(
      contains(e, "--resume '" + path("ckpt").string() + "': rank1.safetensors is missing (the manifest lists it: "))
      << e;
}

TEST_F(FsdpCheckpointErrors, ACutShortFileIsNamed) {
  const std::string bytes = slurp(path("ckpt") / "model.safetensors");
  spit(path("ckpt") / "model.safetensors", bytes.substr(0, bytes.size() / 2));
  const std::string e = resume_error(resume());
  EXPECT_TRUE(contains(e, "model.safetensors' has " + std::to_string(bytes.size() / 2) + " bytes, the manifest says " +
                              std::to_string(bytes.size())))
      << e;
}

TEST_F(FsdpCheckpointErrors, AnotherWorldSizeIsNamed) {
  Case c;
  c.world = 4;
  const std::string e = resume_error(resume(c));
  EXPECT_TRUE(contains(e, "was saved by a different run")) << e;
  EXPECT_TRUE(contains(e, "fsdp.world (--world): the checkpoint has 2, this run has 4")) << e;
  EXPECT_TRUE(contains(e, "fsdp.shard_group (--strategy/--hybrid-group): the checkpoint has 2, this run has 4")) << e;
  EXPECT_FALSE(contains(e, "fsdp.units")) << e;  // the layout follows from the world: not a second cause
  EXPECT_TRUE(contains(e, "(only the layout differs: --reshard continues it in this run's layout")) << e;
}

TEST_F(FsdpCheckpointErrors, AnotherModelIsNamed) {
  FsdpRun other = resume();
  other.run.preset = "test-small";
  const std::string e = resume_error(other);
  EXPECT_TRUE(contains(e, "model.identity.n_embd (--model/--preset): the checkpoint has 32, this run has ")) << e;
  other.run.model = "mlp";
  other.run.preset = "";
  other.run.seq = 0;  // mlp reads no sequences
  EXPECT_TRUE(contains(resume_error(other), "model.name (--model): the checkpoint has \"gpt2\", this run has \"mlp\""));
}

TEST_F(FsdpCheckpointErrors, AnotherStrategyOrOptimizerIsNamed) {
  Case zero2;
  zero2.strategy = ShardingStrategy::zero2;
  EXPECT_TRUE(contains(resume_error(resume(zero2)),
                       "fsdp.strategy (--strategy): the checkpoint has \"full\", this run has \"zero2\""));
  Case sgd;
  sgd.optimizer = "sgd";
  sgd.momentum = 0.9;
  const std::string e = resume_error(resume(sgd));
  EXPECT_TRUE(contains(e, "optimizer.name (--optimizer): the checkpoint has \"adamw\", this run has \"sgd\"")) << e;
  EXPECT_FALSE(contains(e, "momentum")) << e;  // another optimizer: its name says it, not each hyper-parameter
  Case momentum;
  momentum.optimizer = "sgd";
  momentum.momentum = 0.9;
  FsdpRun sgd_run = make_run(momentum, kStop);
  sgd_run.run.checkpoint_dir = path("sgd").string();
  train(sgd_run);
  momentum.momentum = 0.8;
  FsdpRun other_momentum = make_run(momentum, kSteps);
  other_momentum.run.resume_dir = path("sgd").string();
  EXPECT_TRUE(contains(resume_error(other_momentum),
                       "optimizer.momentum (--momentum): the checkpoint has 0.9, this run has 0.8"));
  Case lr;
  lr.lr = 1e-3;
  EXPECT_TRUE(contains(resume_error(resume(lr)), "optimizer.lr (--lr): the checkpoint has 0.01, this run has 0.001"));
  Case bf16;
  bf16.param_dtype = DType::bf16;
  EXPECT_TRUE(contains(resume_error(resume(bf16)), "fsdp.param_dtype (--precision): the checkpoint has \"f32\""));
  FsdpRun seed = resume();
  seed.run.seed = 7;
  EXPECT_TRUE(contains(resume_error(seed), "data.seed (--seed): the checkpoint has 0, this run has 7"));
  Case accumulate;
  accumulate.accumulate = 2;
  EXPECT_TRUE(contains(resume_error(resume(accumulate)),
                       "data.accumulate (--accumulate): the checkpoint has 1, this run has 2"));
  Case clipped;
  clipped.clip_grad_norm = 0.5;
  EXPECT_TRUE(contains(resume_error(resume(clipped)),
                       "optimizer.max_grad_norm (--clip-grad-norm): the checkpoint has nothing, this run has 0.5"));
}

// ---- resharding (--reshard) --------------------------------------------------------------------------

// The largest difference between two model.safetensors files' values, tensor by tensor.
double largest_difference(const fs::path& a, const fs::path& b) {
  const SafetensorsFile x = SafetensorsFile::read(a / "model.safetensors");
  const SafetensorsFile y = SafetensorsFile::read(b / "model.safetensors");
  double largest = 0;
  for (const SafetensorsFile::Entry& e : x.entries()) {
    const std::span<const std::byte> other = y.expect(e.name, DType::f32, e.shape);
    std::vector<float> u(e.bytes.size() / sizeof(float)), v(u.size());
    std::memcpy(u.data(), e.bytes.data(), e.bytes.size());
    std::memcpy(v.data(), other.data(), other.size());
    for (std::size_t i = 0; i < u.size(); ++i) largest = std::max(largest, std::abs(double(u[i]) - double(v[i])));
  }
  return largest;
}

double largest_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double largest = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) largest = std::max(largest, std::abs(a[i] - b[i]));
  return largest;
}

// At one W every strategy and wrap computes the same bits (each element's gradient is the same ranks' sum in the
// same order), so a run resumed into another layout goes on bit for bit as the uninterrupted run: an element moved
// to a wrong place, or padding taken for a value, would show in the losses and the final parameters.
TEST_F(FsdpCheckpointErrors, ReshardingAtTheSameWorldSizeIsBitIdenticalToOneRun) {
  FsdpRun whole = make_run(Case{}, kSteps);
  whole.run.save_final = path("whole").string();
  const std::vector<double> all = train(whole);
  const std::vector<double> expected(all.begin() + kStop, all.end());
  for (const Case& c : {Case{.name = "zero2", .strategy = ShardingStrategy::zero2},
                        Case{.name = "no_shard", .strategy = ShardingStrategy::no_shard},
                        Case{.name = "grad_op_nested", .strategy = ShardingStrategy::shard_grad_op, .wrap = "nested"},
                        Case{.name = "linear", .wrap = "linear"}, Case{.name = "model", .wrap = "model"},
                        Case{.name = "offload_linear", .wrap = "linear", .offload = true}}) {
    SCOPED_TRACE(c.name);
    FsdpRun run = resume(c);
    run.run.reshard = true;
    run.run.save_final = path(c.name).string();
    EXPECT_EQ(bits(train(run)), bits(expected));
    EXPECT_TRUE(slurp(path(c.name) / "model.safetensors") == slurp(path("whole") / "model.safetensors"));
  }
  // SGD's momentum and bf16 compute, from a ZeRO-2 checkpoint of 3 ranks into FULL_SHARD's units of each Linear.
  const Case zero2{.world = 3,
                   .strategy = ShardingStrategy::zero2,
                   .optimizer = "sgd",
                   .lr = 0.05,
                   .momentum = 0.9,
                   .param_dtype = DType::bf16};
  FsdpRun saved = make_run(zero2, kStop);
  saved.run.checkpoint_dir = path("zero2_ckpt").string();
  train(saved);
  Case linear = zero2;
  linear.strategy = ShardingStrategy::full_shard;
  linear.wrap = "linear";
  FsdpRun run = make_run(linear, kSteps);
  run.run.resume_dir = path("zero2_ckpt").string();
  run.run.reshard = true;
  const std::vector<double> zero2_all = train(make_run(zero2, kSteps));
  EXPECT_EQ(bits(train(run)), bits(std::vector<double>(zero2_all.begin() + kStop, zero2_all.end())));
}

// At another W the state moves as exactly, and the steps after it sum each gradient over the new ranks, which
// rounds otherwise. So the losses agree to the last bits of an f32 loss (1e-6 relative: 4 units in the last place
// at 4.2; the same training at the new W from step 1 is off by 1 or 2), and the final parameters differ from the
// uninterrupted W = 2 run's no more than that training's do (measured here: AdamW turns the roundings into up to
// about 3e-5 in a parameter after 6 steps). A misplaced element would be off by its whole value.
TEST_F(FsdpCheckpointErrors, ReshardingToAnotherWorldSizeContinuesTheTraining) {
  FsdpRun whole = make_run(Case{}, kSteps);
  whole.run.save_final = path("whole").string();
  const std::vector<double> all = train(whole);
  const std::vector<double> expected(all.begin() + kStop, all.end());
  for (const Case& c :
       {Case{.name = "full_w4", .world = 4}, Case{.name = "full_w1", .world = 1},
        Case{.name = "zero2_w3", .world = 3, .strategy = ShardingStrategy::zero2},
        Case{.name = "hybrid_w4_s2", .world = 4, .strategy = ShardingStrategy::hybrid_shard, .hybrid_group = 2}}) {
    SCOPED_TRACE(c.name);
    FsdpRun from_the_start = make_run(c, kSteps);
    from_the_start.run.save_final = path(c.name + "_whole").string();
    const std::vector<double> at_new_w = train(from_the_start);
    FsdpRun run = resume(c);
    run.run.reshard = true;
    run.run.save_final = path(c.name).string();
    const std::vector<double> resumed = train(run);
    ASSERT_EQ(resumed.size(), expected.size());
    EXPECT_LE(largest_difference(resumed, expected), 1e-6 * expected.front());
    EXPECT_LE(largest_difference(at_new_w, all), 1e-6 * expected.front());
    EXPECT_LE(largest_difference(path(c.name), path("whole")),
              largest_difference(path(c.name + "_whole"), path("whole")));
  }
}

TEST_F(FsdpCheckpointErrors, ReshardChangesTheLayoutOnly) {
  Case lr;
  lr.world = 4;
  lr.lr = 1e-3;
  FsdpRun run = resume(lr);
  run.run.reshard = true;
  const std::string e = resume_error(run);
  EXPECT_TRUE(contains(e,
                       "--reshard moves the state to another world size, strategy or wrap, and the checkpoint was "
                       "saved by a run that differs in more: optimizer.lr (--lr): the checkpoint has 0.01, this run "
                       "has 0.001"))
      << e;
  EXPECT_FALSE(contains(e, "fsdp.world")) << e;
  FsdpRun no_resume = make_run(Case{}, kSteps);
  no_resume.run.reshard = true;
  EXPECT_TRUE(contains(resume_error(no_resume),
                       "--reshard moves a checkpoint's state into this run's layout; it needs "
                       "--resume DIR"));
}

// A checkpoint written before manifests recorded the layouts resumes as it was saved, and only so.
TEST_F(FsdpCheckpointErrors, ACheckpointWithoutLayoutsResumesOnlyAsSaved) {
  nlohmann::json edited = manifest();
  edited.erase("layouts");
  rewrite_manifest(edited);
  Case c;
  c.world = 4;
  FsdpRun run = resume(c);
  run.run.reshard = true;
  const std::string e = resume_error(run);
  EXPECT_TRUE(contains(e,
                       "records no layouts (its fsdplab predates --reshard), so its state cannot move to another "
                       "layout; resume it as it was saved: --world 2, --strategy full (shard group 2), --wrap block"))
      << e;
  const std::vector<double> all = train(make_run(Case{}, kSteps));
  EXPECT_EQ(bits(train(resume())), bits(std::vector<double>(all.begin() + kStop, all.end())));
}

// The schedule is not part of the state: a checkpoint of an ASYNC run (prefetching, the default)
// resumes under SYNC without prefetch and the two-buffer pool, bit for bit as the ASYNC run goes on.
TEST_F(FsdpCheckpointErrors, ScheduleOptionsMayChangeOnResume) {
  const std::vector<double> expected = train(make_run(Case{}, kSteps));
  FsdpRun sync = resume();
  sync.options = sync_schedule(sync.options);
  sync.options.buffers = UnshardBuffers::pool;
  EXPECT_EQ(bits(train(sync)), bits(std::vector<double>(expected.begin() + kStop, expected.end())));
}

TEST_F(FsdpCheckpointErrors, NothingLeftToRunAndConflictingOptionsAreErrors) {
  FsdpRun done = resume();
  done.run.steps = kStop;
  EXPECT_TRUE(contains(resume_error(done), "holds 3 completed steps and --steps is 3: nothing left to run"));
  FsdpRun init = resume();
  init.run.load_init = path("ckpt").string();
  EXPECT_TRUE(
      contains(resume_error(init), "--resume continues a run from its checkpoint; --load-init and --save-init"));
  FsdpRun missing = resume();
  missing.run.resume_dir = path("nowhere").string();
  EXPECT_TRUE(contains(resume_error(missing), "nowhere': no such folder"));
  { std::ofstream(path("a file")) << "not a checkpoint\n"; }
  FsdpRun file = resume();
  file.run.resume_dir = path("a file").string();
  EXPECT_TRUE(contains(resume_error(file), "a file' is not a folder; expected a folder written by --checkpoint"));
  FsdpRun every = make_run(Case{}, 2);
  every.run.checkpoint_every = 1;
  EXPECT_TRUE(contains(resume_error(every), "--checkpoint-every needs --checkpoint DIR"));
}

// A rank that fails while the next checkpoint is written fails the run; the previous checkpoint stays
// byte for byte what it was, nothing is left beside it, and a run still resumes from it exactly.
TEST_F(FsdpCheckpointErrors, AFailingRankLeavesThePreviousCheckpointIntact) {
  const std::map<std::string, std::string> previous = snapshot(path("ckpt"));
  for (int failing : {1, 0}) {
    SCOPED_TRACE("rank " + std::to_string(failing) + " fails");
    FsdpRun run = resume();
    run.run.checkpoint_dir = path("ckpt").string();
    run.on_checkpoint_written = [&](int rank, int step) {
      if (rank == failing && step == kSteps) fail("disk full (injected)");
    };
    const std::string e = resume_error(run);
    EXPECT_EQ(e, "rank " + std::to_string(failing) + " failed: disk full (injected)");
    EXPECT_TRUE(snapshot(path("ckpt")) == previous);
    EXPECT_TRUE(leftovers(path("ckpt")).empty());
  }
  const std::vector<double> expected = train(make_run(Case{}, kSteps));
  const std::vector<double> after = train(resume());
  EXPECT_EQ(bits(after), bits(std::vector<double>(expected.begin() + kStop, expected.end())));
}

// A place that cannot hold a checkpoint is refused before any rank starts, and a folder that holds
// something other than a checkpoint is never replaced.
TEST_F(FsdpCheckpoint, UnusableTargetsAreRefusedBeforeTraining) {
  fs::create_directories(path("notes"));
  spit(path("notes") / "todo.txt", "keep me");
  FsdpRun run = make_run(Case{}, 1);
  run.run.checkpoint_dir = path("notes").string();
  EXPECT_TRUE(contains(error_of([&] { train(run); }), "is a folder that holds no checkpoint (no manifest.json) and is "
                                                      "not empty; refusing to replace it"));
  EXPECT_EQ(slurp(path("notes") / "todo.txt"), "keep me");
  run.run.checkpoint_dir = (path("notes") / "todo.txt" / "ckpt").string();  // a parent that is a file
  EXPECT_TRUE(contains(error_of([&] { train(run); }), "cannot create the folder"));
  run.run.checkpoint_dir = (path("notes") / "todo.txt").string();
  EXPECT_TRUE(contains(error_of([&] { train(run); }), "is not a folder (a file or a symbolic link)"));
  fs::create_directories(path("empty"));  // an empty folder is fine
  run.run.checkpoint_dir = path("empty").string();
  train(run);
  EXPECT_TRUE(fs::exists(path("empty") / "manifest.json"));
}

// Where the parent folder is not writable (not testable as root, whom permissions do not stop), the
// save fails before training and the previous checkpoint is untouched.
TEST_F(FsdpCheckpointErrors, AnUnwritableParentLeavesThePreviousCheckpointIntact) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes to read-only folders";
  const std::map<std::string, std::string> previous = snapshot(path("ckpt"));
  fs::permissions(path("ckpt").parent_path(), fs::perms::owner_write, fs::perm_options::remove);
  FsdpRun run = resume();
  run.run.checkpoint_dir = path("ckpt").string();
  const std::string e = resume_error(run);
  fs::permissions(path("ckpt").parent_path(), fs::perms::owner_write, fs::perm_options::add);
  EXPECT_TRUE(contains(e, "cannot create '")) << e;
  EXPECT_TRUE(snapshot(path("ckpt")) == previous);
}

// Ranks wait at a barrier while rank 0 writes the whole model: a run that checkpoints gpt2 124M lets
// them wait minutes (without it, gpt2-medium at W = 2 failed: "rank 1 waited 5.0 s in barrier"); a tiny
// model keeps the usual stall timeout.
TEST(FsdpCheckpointTimeout, GrowsWithWhatRankZeroWrites) {
  using namespace std::chrono_literals;
  RunConfig run;
  run.model = "gpt2";
  run.preset = "gpt2";
  BuiltModel small = build_model(run);
  const auto adamw = checkpoint_wait_timeout(*small.model, {"adamw", 1e-3, 0}, 5000ms);
  EXPECT_GE(adamw, 190s);  // 124.4M parameters x 4 bytes x (2 + 2 states) x 2 at 20 MB/s: 199 s
  EXPECT_LT(checkpoint_wait_timeout(*small.model, {"sgd", 1e-3, 0}, 5000ms), adamw);
  run.preset = "test-tiny";
  EXPECT_EQ(checkpoint_wait_timeout(*build_model(run).model, {"adamw", 1e-3, 0}, 5000ms), 5000ms);
}

}  // namespace
}  // namespace fsdplab
