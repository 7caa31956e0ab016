// checkpoint.hpp — a model's parameters as a folder that Hugging Face and fsdplab both read:
//   DIR/model.safetensors   every parameter in f32 under its dotted name (a tied one once)
//   DIR/config.json         the model's configuration (for gpt2, GPT2Config's keys)
// Both files are written to temporary names and renamed, so an interrupted save leaves the old
// folder contents or the new ones, never half a file.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/nn/module.hpp"

namespace fsdplab {

// The parameters must be materialised; the host synchronises with their devices first.
void save_checkpoint(const std::filesystem::path& dir, Module& model, const nlohmann::json& config);

// Loads DIR into the model's materialised parameters. `identity` holds the configuration keys that
// say which model this is: each must be in DIR/config.json with the same value, so a folder from
// another model is an Error naming the key. A missing, extra or misshapen tensor is an Error naming it.
void load_checkpoint(const std::filesystem::path& dir, Module& model, const nlohmann::json& identity);

}  // namespace fsdplab
