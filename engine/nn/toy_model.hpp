// toy_model.hpp — the ToyModel of the assignment's FSDP tests: the smallest model on which every FSDP
// task can be checked by hand.
//
//   fc1 Linear(in -> 10, no bias) -> ReLU -> ln LayerNorm(10) -> fc2 Linear(10 -> out, no bias), MSE
//
// Parameter names and layouts are PyTorch's (fc1.weight [10, in], ln.weight, ln.bias, fc2.weight
// [out, 10]); initialisation is PyTorch's default (nn.Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in))).
#pragma once
#include "engine/nn/layers.hpp"
#include "engine/nn/model.hpp"

namespace fsdplab {

class ToyModel final : public Model {
 public:
  explicit ToyModel(std::int64_t in_features = 10, std::int64_t out_features = 5);
  std::string_view kind() const override { return "ToyModel"; }
  Tensor forward(RunContext& ctx, const Batch& batch) override;
  void backward(RunContext& ctx) override;

 private:
  Linear& fc1_;
  LayerNorm& ln_;
  Linear& fc2_;
  Tensor hidden_, prediction_, targets_;  // saved for backward
};

}  // namespace fsdplab
