// checkpoint.hpp — a model's parameters as a folder that Hugging Face and fsdplab both read:
//   DIR/model.safetensors   every parameter in f32 under its dotted name (a tied one once)
//   DIR/config.json         the model's configuration (GPT2Config's or LlamaConfig's keys)
// Both files are written to temporary names and renamed, so an interrupted save leaves the old
// folder contents or the new ones, never half a file.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/nn/module.hpp"
#include "engine/nn/safetensors.hpp"

namespace fsdplab {

// The two files of such a folder, as save_checkpoint writes them and CheckpointFile reads them.
inline constexpr std::string_view kCheckpointWeightsFile = "model.safetensors";
inline constexpr std::string_view kCheckpointConfigFile = "config.json";

// The parameters must be materialised; the host synchronises with their devices first. A parameter
// that holds NaN or an infinity (a diverged run) is an Error naming it, and nothing is written. Each is
// saved without its padding rows (Parameter::padding_rows), which must hold 0, so the folder is
// Hugging Face's shape: GPT-2's wte is [50257, 768] in the file, [50304, 768] in memory.
void save_checkpoint(const std::filesystem::path& dir, Module& model, const nlohmann::json& config);
// The same folder, byte for byte, from values held on the host: values[i] is parameter i of
// model.parameters(), whole and flattened (FSDP checkpoints assemble them from the ranks' shards).
void save_checkpoint(const std::filesystem::path& dir, Module& model, std::span<const std::vector<float>> values,
                     const nlohmann::json& config);

// A configuration key that decides what a model computes from its weights (a norm's epsilon, the activation, the
// rotary base), with what a config that omits it means: Hugging Face's default for the model type, which a folder
// it saved leaves out. Weights of another variant (Llama 3's rope_theta of 500000) run as this model would compute
// something else than the model they were trained as, silently; these keys make that an Error.
struct ModelSetting {
  std::string key;
  nlohmann::json value;      // this model's
  nlohmann::json if_absent;  // what a config without the key means
};

// A checkpoint folder opened and checked against a model: `identity` holds the configuration keys that
// say which model this is, each of which must be in DIR/config.json with the same value (so a folder
// from another model is an Error naming the key); each of `settings` must be there with its value, or absent
// where its if_absent is that value; and every parameter must be there in f32 with its
// shape and nothing else (an Error naming the tensor). A parameter's shape in the file is its logical
// shape: without its padding rows (Parameter::padding_rows), which read as 0. Read-only afterwards: FSDP
// opens it once, before any rank starts, and every rank reads its own slices.
class CheckpointFile {
 public:
  static CheckpointFile open(const std::filesystem::path& dir, Module& model, const nlohmann::json& identity,
                             std::span<const ModelSetting> settings = {});
  // Elements [begin, begin + out.size()) of `param` as stored, flattened: its padding rows read as 0.
  void read(const Parameter& param, std::int64_t begin, std::span<float> out) const;

 private:
  explicit CheckpointFile(SafetensorsFile file) : file_(std::move(file)) {}
  SafetensorsFile file_;
};

// Loads DIR (opened as CheckpointFile::open does) into the model's materialised parameters. `identity` holds the
// configuration keys that say which model this is: each must be in DIR/config.json with the same value, so a folder
// from another model is an Error naming the key; `settings` are checked as open() does. A missing, extra or
// misshapen tensor is an Error naming it.
void load_checkpoint(const std::filesystem::path& dir, Module& model, const nlohmann::json& identity,
                     std::span<const ModelSetting> settings = {});

}  // namespace fsdplab
