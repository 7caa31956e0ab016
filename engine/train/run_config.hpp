// run_config.hpp — everything a training run is told: model, data, optimizer, steps, files.
#pragma once
#include <cstdint>
#include <string>

#include "engine/optim/optimizer.hpp"

namespace fsdplab {

struct RunConfig {
  std::string model = "toy";  // toy | mlp | gpt2
  std::string preset;         // gpt2: a named size (gpt2_preset); empty: "test-tiny"
  std::int64_t mlp_width = 64;
  int mlp_depth = 4;
  int world = 1;
  int steps = 20;
  std::uint64_t seed = 0;
  std::int64_t batch = 8;  // global rows (sequences) per step, split over the ranks
  std::int64_t seq = 0;    // gpt2 tokens per sequence; 0: the model's context length
  std::string optimizer = "adamw";
  double lr = 1e-3;
  double momentum = 0;     // sgd only; every other hyper-parameter is PyTorch's default
  std::string data_file;   // gpt2: a uint16 token file instead of synthetic tokens
  std::string device_preset = "h100-sxm";
  std::string link_preset;  // empty: the device preset's default link
  std::string losses_file;  // CSV step,loss
  std::string trace_file;
  std::string save_init;    // folders: model.safetensors + config.json
  std::string load_init;
  std::string save_final;

  OptimizerSpec optimizer_spec() const { return {optimizer, lr, momentum}; }
};

}  // namespace fsdplab
