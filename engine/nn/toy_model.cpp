#include "engine/nn/toy_model.hpp"

#include "engine/runtime/error.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/tensor/loss.hpp"

namespace fsdplab {
ToyModel::ToyModel(std::int64_t in_features, std::int64_t out_features)
    : fc1_(register_module<Linear>("fc1", in_features, 10, false, WeightLayout::out_in,
                                   linear_default_init(in_features), ParamInit{})),
      ln_(register_module<LayerNorm>("ln", 10)),
      fc2_(register_module<Linear>("fc2", 10, out_features, false, WeightLayout::out_in, linear_default_init(10),
                                   ParamInit{})) {}

Tensor ToyModel::forward(RunContext& ctx, const Batch& batch) {
  enter_forward(ctx);
  hidden_ = fc1_.forward(ctx, batch.inputs);
  Tensor activated = ctx.activation(hidden_.shape(), "relu.out");
  relu(ctx.stream(), hidden_, activated);
  prediction_ = fc2_.forward(ctx, ln_.forward(ctx, activated));
  targets_ = batch.targets;
  Tensor loss = Tensor::empty(ctx.device, {1}, DType::f32, MemTag::activation, "loss");
  mse_loss(ctx.stream(), prediction_, targets_, loss);
  exit_forward(ctx);
  return loss;
}

void ToyModel::backward(RunContext& ctx) {
  enter_backward(ctx);
  check(prediction_.defined(), "ToyModel: backward without a forward");
  Tensor dprediction = ctx.activation(prediction_.shape(), "dprediction");
  fill(ctx.stream(), dprediction, 0);  // the loss backward adds into it
  mse_loss_backward(ctx.stream(), prediction_, targets_, ctx.loss_scale, dprediction);
  Tensor dactivated = ln_.backward(ctx, fc2_.backward(ctx, dprediction));
  Tensor dhidden = ctx.activation(hidden_.shape(), "relu.dx");
  fill(ctx.stream(), dhidden, 0);
  relu_backward(ctx.stream(), hidden_, dactivated, dhidden);
  fc1_.backward(ctx, dhidden);
  hidden_ = prediction_ = targets_ = Tensor();
  exit_backward(ctx);
}

}  // namespace fsdplab
