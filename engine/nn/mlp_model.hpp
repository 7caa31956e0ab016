// mlp_model.hpp — a deep residual MLP: the model where FSDP's units are easiest to see, since every
// block is the same size.
//
//   x -> N x [ x + fc2(gelu(fc1(ln(x)))) ] -> MSE against the target,  fc1: d -> 4d, fc2: 4d -> d
//
// Names blocks.{i}.ln.*, blocks.{i}.fc1.*, blocks.{i}.fc2.*; nn.Linear layouts and PyTorch's default
// initialisation (U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases, LayerNorm 1 and 0).
#pragma once
#include <vector>

#include "engine/nn/layers.hpp"
#include "engine/nn/model.hpp"

namespace fsdplab {

class MlpBlock final : public Module {
 public:
  MlpBlock(std::string name, std::int64_t width);
  std::string_view kind() const override { return "MlpBlock"; }
  Tensor forward(RunContext& ctx, const Tensor& x);
  // Returns the gradient of the block's input (the residual path included).
  Tensor backward(RunContext& ctx, const Tensor& dy);

 private:
  LayerNorm& ln_;
  Linear& fc1_;
  Linear& fc2_;
};

class MlpModel final : public Model {
 public:
  MlpModel(std::int64_t width, int depth);
  std::string_view kind() const override { return "MlpModel"; }
  Tensor forward(RunContext& ctx, const Batch& batch) override;
  void backward(RunContext& ctx) override;

 private:
  std::int64_t width_;
  ModuleList& block_list_;
  std::vector<MlpBlock*> blocks_;
  Tensor prediction_, targets_;
};

}  // namespace fsdplab
