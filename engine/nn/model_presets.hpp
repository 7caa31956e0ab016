// model_presets.hpp — a model's named sizes ("test-tiny", "gpt2", "7b", ...): the table each model file
// keeps, and the two questions every CLI and panel asks of it — which names exist, and the config of
// one (an Error listing the names for any other).
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runtime/error.hpp"

namespace fsdplab {

template <class Config>
struct ModelPreset {
  std::string_view name;
  Config config;
};

template <class Config, std::size_t N>
std::vector<std::string_view> model_preset_names(const std::array<ModelPreset<Config>, N>& presets) {
  std::vector<std::string_view> names;
  for (const ModelPreset<Config>& p : presets) names.push_back(p.name);
  return names;
}

// `model` names the table in the error: "unknown gpt2 preset 'x'; expected one of: ...".
template <class Config, std::size_t N>
Config find_model_preset(const std::array<ModelPreset<Config>, N>& presets, std::string_view model,
                         std::string_view name) {
  std::string known;
  for (const ModelPreset<Config>& p : presets) {
    if (p.name == name) return p.config;
    known += (known.empty() ? "" : ", ") + std::string(p.name);
  }
  fail("--preset: unknown ", model, " preset '", name, "'; expected one of: ", known);
}

}  // namespace fsdplab
