#include "engine/nn/mlp_model.hpp"

#include "engine/runtime/error.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/tensor/loss.hpp"

namespace fsdplab {
MlpBlock::MlpBlock(std::string name, std::int64_t width)
    : Module(std::move(name)),
      ln_(register_module<LayerNorm>("ln", width)),
      fc1_(register_module<Linear>("fc1", width, 4 * width, true, WeightLayout::out_in, linear_default_init(width),
                                   linear_default_init(width), Activation::gelu)),
      fc2_(register_module<Linear>("fc2", 4 * width, width, true, WeightLayout::out_in, linear_default_init(4 * width),
                                   linear_default_init(4 * width))) {}

// fc1's epilogue applies the GELU and fc2's adds the residual ([Note: fused epilogues] in layers.hpp).
Tensor MlpBlock::forward(RunContext& ctx, const Tensor& x) {
  enter_forward(ctx);
  Tensor y = fc2_.forward(ctx, fc1_.forward(ctx, ln_.forward(ctx, x)), x);
  exit_forward(ctx);
  return y;
}

// The residual passes dy through unchanged; the LayerNorm adds the branch's gradient into it, so dy's buffer
// becomes the input's gradient.
Tensor MlpBlock::backward(RunContext& ctx, const Tensor& dy) {
  enter_backward(ctx);
  ln_.backward_adding_to(ctx, fc1_.backward(ctx, fc2_.backward(ctx, dy)), dy);
  exit_backward(ctx);
  return dy;
}

MlpModel::MlpModel(std::int64_t width, int depth)
    : width_(width), block_list_(register_module<ModuleList>("blocks")) {
  check(width > 0 && depth > 0, "mlp: width and depth must be positive, got width ", width, ", depth ", depth);
  for (int i = 0; i < depth; ++i) blocks_.push_back(&block_list_.append<MlpBlock>(width));
}

Tensor MlpModel::forward(RunContext& ctx, const Batch& batch) {
  enter_forward(ctx);
  check(batch.inputs.ndim() == 2 && batch.inputs.dim(1) == width_, "mlp: inputs must be [B, ", width_, "], got ",
        batch.inputs.describe());
  Tensor x = batch.inputs;
  for (MlpBlock* block : blocks_) x = block->forward(ctx, x);
  prediction_ = x;
  targets_ = batch.targets;
  Tensor loss = Tensor::empty(ctx.device, {1}, DType::f32, MemTag::activation, "loss");
  mse_loss(ctx.stream(), prediction_, targets_, loss);
  exit_forward(ctx);
  return loss;
}

void MlpModel::backward(RunContext& ctx) {
  enter_backward(ctx);
  check(prediction_.defined(), "mlp: backward without a forward");
  Tensor dy = ctx.activation(prediction_.shape(), "dprediction");
  fill(ctx.stream(), dy, 0);
  mse_loss_backward(ctx.stream(), prediction_, targets_, ctx.loss_scale, dy);
  prediction_ = targets_ = Tensor();
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) dy = (*it)->backward(ctx, dy);
  exit_backward(ctx);
}

}  // namespace fsdplab
