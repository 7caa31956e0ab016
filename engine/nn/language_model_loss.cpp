#include "engine/nn/language_model_loss.hpp"

#include "engine/runtime/error.hpp"
#include "engine/tensor/loss.hpp"

namespace fsdplab {

// The messages are built only on failure (fail, not check): this runs before every forward.
void LanguageModelLoss::check_batch(const Batch& batch, std::int64_t max_positions,
                                    std::string_view positions_field) const {
  const Tensor& in = batch.inputs;
  if (!(in.defined() && in.ndim() == 2 && in.dtype() == DType::i32 && in.numel() > 0))
    fail(model_, ": batch.inputs must be [B, T] i32 token ids, got ", in.describe());
  if (!(in.dim(1) <= max_positions))
    fail(model_, ": a sequence of at most ", positions_field, " = ", max_positions, " tokens, got T = ", in.dim(1),
         " in ", in.describe());
  if (!(batch.targets.defined() && batch.targets.shape() == in.shape() && batch.targets.dtype() == DType::i32))
    fail(model_, ": batch.targets must be ", shape_str(in.shape()), " i32 like the inputs, got ",
         batch.targets.describe());
}

Tensor LanguageModelLoss::forward(RunContext& ctx, const Tensor& logits, const Tensor& targets) {
  const std::int64_t N = targets.numel();
  logits_ = logits;
  targets_ = targets.reshape({N});
  lse_ = Tensor::empty(ctx.device, {N}, DType::f32, MemTag::activation, "lse");
  Tensor loss = Tensor::empty(ctx.device, {1}, DType::f32, MemTag::activation, "loss");
  cross_entropy(ctx.stream(), logits_, vocab_size_, targets_, loss, lse_);
  return loss;
}

void LanguageModelLoss::expect_forward() const { check(logits_.defined(), model_, ": backward without a forward"); }

Tensor LanguageModelLoss::backward(RunContext& ctx) {
  expect_forward();
  Tensor dlogits = logits_;  // in place: the loss backward writes every element, padding included
  cross_entropy_backward(ctx.stream(), logits_, vocab_size_, targets_, lse_, ctx.loss_scale, dlogits);
  logits_ = targets_ = lse_ = Tensor();
  return dlogits;
}

}  // namespace fsdplab
