// fsdp_runs.hpp — what the FSDP integration tests share: a small GPT-2 run, its losses, its saved
// parameters, its refusal.
#pragma once
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/nn/safetensors.hpp"
#include "engine/runtime/error.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/run_config.hpp"
#include "engine/train/trainer.hpp"

namespace fsdplab::testing {

// gpt2 at a test size on `world` ranks: `batch` sequences of `seq` tokens a step, AdamW at lr 1e-3.
inline RunConfig gpt2_run(int world, std::int64_t batch, std::int64_t seq, int steps,
                          const std::string& preset = "test-tiny") {
  RunConfig run;
  run.model = "gpt2";
  run.preset = preset;
  run.world = world;
  run.batch = batch;
  run.seq = seq;
  run.steps = steps;
  return run;
}

// One step of `run` as a SYNC dry run (time and memory only), where every buffer is freed when its
// task returns: the schedule the memory model describes.
inline FsdpRun sync_dry_run(RunConfig run) {
  FsdpRun fsdp;
  fsdp.run = std::move(run);
  fsdp.run.steps = 1;
  fsdp.dry_run = true;
  fsdp.options = sync_schedule(fsdp.options);
  return fsdp;
}

// Each rank's ledger peaks by tag after training `fsdp`.
inline std::vector<TagBytes> ledger_peaks(FsdpRun fsdp) {
  std::vector<TagBytes> peaks(static_cast<std::size_t>(fsdp.run.world));
  std::mutex mutex;
  fsdp.on_rank_done = [&](int rank, Device& device) {
    const std::lock_guard<std::mutex> lock(mutex);
    peaks[static_cast<std::size_t>(rank)] = device.ledger().peak_by_tag();
  };
  train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
  return peaks;
}

inline std::int64_t at(const TagBytes& bytes, MemTag tag) { return bytes[static_cast<std::size_t>(tag)]; }

// What train_fsdp refuses `fsdp` with; empty when it trains.
inline std::string refusal_of(const FsdpRun& fsdp) {
  try {
    train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The f32 parameters of a folder's model.safetensors (--save-final), by name.
inline std::map<std::string, std::vector<float>> read_params(const std::filesystem::path& dir) {
  return read_f32_tensors(dir / "model.safetensors");
}

inline std::vector<double> losses_of(const std::vector<StepReport>& reports) {
  std::vector<double> out;
  for (const StepReport& s : reports) out.push_back(s.loss);
  return out;
}

}  // namespace fsdplab::testing
