#include "engine/nn/layers.hpp"

#include "engine/nn/counter_rng.hpp"
#include "engine/runtime/error.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/tensor/embedding.hpp"
#include "engine/tensor/layernorm.hpp"
#include "engine/tensor/matmul.hpp"

namespace fsdplab {

Tensor as_rows(const Tensor& x) { return x.reshape({x.numel() / x.dim(-1), x.dim(-1)}); }

void check_gradient_to_add_into(const Module& module, const Tensor& input, const Tensor& dx) {
  if (!(dx.shape() == input.shape()))
    fail(module.name(), ": the gradient to add into must be the input's shape ", shape_str(input.shape()), ", got ",
         dx.describe());
}

ParamInit linear_default_init(std::int64_t fan_in) {
  const float bound = linear_default_bound(fan_in);
  return ParamInit::uniform(-bound, bound);
}

// ---- Linear --------------------------------------------------------------------------------------

Linear::Linear(std::string name, std::int64_t in, std::int64_t out, bool bias, WeightLayout layout,
               ParamInit weight_init, ParamInit bias_init, Activation activation)
    : Module(std::move(name)), in_(in), out_(out), layout_(layout), activation_(activation) {
  weight_ =
      &register_parameter("weight", layout == WeightLayout::out_in ? Shape{out, in} : Shape{in, out}, weight_init);
  if (bias) bias_ = &register_parameter("bias", {out}, bias_init);
}

Tensor Linear::forward(RunContext& ctx, const Tensor& x, const Tensor& residual) {
  enter_forward(ctx);
  if (!(x.ndim() == 2 && x.dim(1) == in_)) fail(name(), ": input must be [N, ", in_, "], got ", x.describe());
  if (residual.defined() && activation_ != Activation::none)
    fail(name(), ": a residual is added after the bias only, not after an activation");
  // The bias, GELU and skip connection run in the GEMM's epilogue: see [Note: fused epilogues].
  Tensor y = ctx.activation({x.dim(0), out_}, name() + ".out");
  MatmulEpilogue epilogue{.bias = bias_ ? value_of(*bias_) : Tensor(), .residual = residual};
  if (activation_ == Activation::gelu) {
    pre_ = y;
    y = ctx.activation(pre_.shape(), name() + ".gelu");
    epilogue.gelu_pre = pre_;
  }
  matmul(ctx.stream(), x, value_of(*weight_), y, {.trans_b = layout_ == WeightLayout::out_in}, epilogue);
  x_ = x;
  exit_forward(ctx);
  return y;
}

Tensor Linear::backward(RunContext& ctx, const Tensor& dy, const Tensor& dx_residual) {
  enter_backward(ctx);
  check(x_.defined(), name(), ": backward without a forward");
  if (dx_residual.defined()) check_gradient_to_add_into(*this, x_, dx_residual);
  if (activation_ == Activation::gelu) {
    gelu_backward_in_place(ctx.stream(), pre_, dy);  // dy is now the gradient of x W + b
    pre_ = Tensor();
  }
  const bool out_in = layout_ == WeightLayout::out_in;
  Tensor dx = ctx.activation({dy.dim(0), in_}, name() + ".dx");
  // out_in: y = x W^T, so dx = dy W and dW += dy^T x.  in_out: y = x W, so dx = dy W^T and dW += x^T dy.
  matmul(ctx.stream(), dy, value_of(*weight_), dx, {.trans_b = !out_in}, {.residual = dx_residual});
  if (out_in) {
    matmul(ctx.stream(), dy, x_, grad_of(*weight_), {.trans_a = true, .beta = 1});
  } else {
    matmul(ctx.stream(), x_, dy, grad_of(*weight_), {.trans_a = true, .beta = 1});
  }
  if (bias_) bias_backward(ctx.stream(), dy, grad_of(*bias_));
  x_ = Tensor();
  exit_backward(ctx);
  return dx;
}

// ---- LayerNorm -----------------------------------------------------------------------------------

LayerNorm::LayerNorm(std::string name, std::int64_t features, float eps)
    : Module(std::move(name)), features_(features), eps_(eps) {
  weight_ = &register_parameter("weight", {features}, ParamInit::constant(1));
  bias_ = &register_parameter("bias", {features}, ParamInit::constant(0));
}

Tensor LayerNorm::forward(RunContext& ctx, const Tensor& x) {
  enter_forward(ctx);
  if (!(x.ndim() == 2 && x.dim(1) == features_))
    fail(name(), ": input must be [N, ", features_, "], got ", x.describe());
  const std::int64_t n = x.dim(0);
  Tensor y = ctx.activation({n, features_}, name() + ".out");
  mean_ = Tensor::empty(ctx.device, {n}, DType::f32, MemTag::activation, name() + ".mean");
  rstd_ = Tensor::empty(ctx.device, {n}, DType::f32, MemTag::activation, name() + ".rstd");
  layernorm(ctx.stream(), x, value_of(*weight_), value_of(*bias_), y, mean_, rstd_, eps_);
  x_ = x;
  exit_forward(ctx);
  return y;
}

Tensor LayerNorm::backward(RunContext& ctx, const Tensor& dy) {
  enter_backward(ctx);
  check(x_.defined(), name(), ": backward without a forward");
  Tensor dx = ctx.activation(x_.shape(), name() + ".dx");
  fill(ctx.stream(), dx, 0);  // layernorm_backward adds into dx
  add_input_gradient(ctx, dy, dx);
  exit_backward(ctx);
  return dx;
}

void LayerNorm::backward_adding_to(RunContext& ctx, const Tensor& dy, const Tensor& dx) {
  enter_backward(ctx);
  check(x_.defined(), name(), ": backward without a forward");
  check_gradient_to_add_into(*this, x_, dx);
  add_input_gradient(ctx, dy, dx);
  exit_backward(ctx);
}

void LayerNorm::add_input_gradient(RunContext& ctx, const Tensor& dy, const Tensor& dx) {
  layernorm_backward(ctx.stream(), dy, x_, value_of(*weight_), mean_, rstd_, dx, grad_of(*weight_), grad_of(*bias_));
  x_ = mean_ = rstd_ = Tensor();
}

// ---- Embedding -----------------------------------------------------------------------------------

Embedding::Embedding(std::string name, std::int64_t count, std::int64_t dim, ParamInit init,
                     std::int64_t padding_rows)
    : Module(std::move(name)), count_(count), dim_(dim) {
  weight_ = &register_parameter("weight", {count + padding_rows, dim}, init, padding_rows);
}

Tensor Embedding::forward(RunContext& ctx, const Tensor& ids) {
  enter_forward(ctx);
  Tensor y = ctx.activation({ids.numel(), dim_}, name() + ".out");
  embedding(ctx.stream(), value_of(*weight_), ids, y);
  ids_ = ids;
  exit_forward(ctx);
  return y;
}

void Embedding::backward(RunContext& ctx, const Tensor& dy) {
  enter_backward(ctx);
  check(ids_.defined(), name(), ": backward without a forward");
  embedding_backward(ctx.stream(), dy, ids_, grad_of(*weight_));
  ids_ = Tensor();
  exit_backward(ctx);
}

Tensor Embedding::first_rows_of(const Tensor& table, const Tensor& x) const {
  if (!(x.ndim() == 3 && x.dim(2) == dim_ && x.dim(1) >= 1 && x.dim(1) <= count_))
    fail(name(), ": expected [B, T, ", dim_, "] with T of 1 to the table's ", count_, " rows, got ", x.describe());
  return table.rows(0, x.dim(1)).reshape({x.dim(1) * dim_});
}

void Embedding::add_first_rows(RunContext& ctx, const Tensor& x) {
  enter_forward(ctx);
  const Tensor rows = x.reshape({x.dim(0), x.numel() / x.dim(0)});
  bias_add(ctx.stream(), rows, first_rows_of(value_of(*weight_), x), rows);
  exit_forward(ctx);
}

void Embedding::add_first_rows_backward(RunContext& ctx, const Tensor& dy) {
  enter_backward(ctx);
  // bias_backward adds the batch's column sums into the gradient's rows, rounded once per element.
  bias_backward(ctx.stream(), dy.reshape({dy.dim(0), dy.numel() / dy.dim(0)}), first_rows_of(grad_of(*weight_), dy));
  exit_backward(ctx);
}

}  // namespace fsdplab
