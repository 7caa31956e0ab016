// optimizer_ops.hpp — one optimizer step over a flat f32 parameter (an FSDP rank's shard of a
// FlatParameter) with its gradient and state, exactly as PyTorch's single-tensor implementations; and the
// scale of gradient-norm clipping that comes before it.
//
// Only f32: updates are applied to the fp32 master copy, since a bf16 parameter would swallow
// updates smaller than 2^-8 of its value. param, grad and state tensors have one shape and must
// not overlap. `step` counts from 1 (the first update is step 1), as PyTorch's state['step'].
// Hyper-parameters are doubles, as PyTorch's Python floats: the scalar factors (bias corrections,
// step size) are computed in double, then each element in f32.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// torch.optim.SGD's defaults (lr as in PyTorch >= 2.2, where it got one).
struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0, as in PyTorch
};

// g = grad + weight_decay * param
// with momentum: buf = g on step 1, else buf = momentum * buf + (1 - dampening) * g;
//                g = nesterov ? g + momentum * buf : buf
// param -= lr * g
// momentum_buf is read and written only when momentum != 0 (it may be undefined otherwise); step 1
// initialises it, so its earlier contents do not matter.
void sgd_update(Stream s, const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const SgdOptions& opt,
                std::int64_t step);

// torch.optim.AdamW's defaults.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// param *= 1 - lr * weight_decay            (decoupled weight decay)
// m = beta1 * m + (1 - beta1) * grad
// v = beta2 * v + (1 - beta2) * grad^2
// param -= (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// m and v start at zero (the caller zeroes them before step 1). m's update is PyTorch 1.13's
// mul-add; PyTorch 2 writes it as m.lerp_(grad, 1 - beta1), equal up to rounding.
void adamw_update(Stream s, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWOptions& opt, std::int64_t step);

// One parameter's operands of an AdamW step; `name` says which in errors.
struct AdamWOperands {
  std::string name;
  Tensor param, grad, m, v;
};

// The update above for every entry of `each`, as one op: each element computed exactly as alone (the same
// bits), but launched once for them all, where an op per parameter costs GPT-2 small 148 launches a step
// (the cuda device launches a kernel per cuda::kAdamWTensorsPerLaunch entries; torch.optim.AdamW's
// fused=True batches the same way). No operand may overlap another, in any entry.
void adamw_update(Stream s, std::span<const AdamWOperands> each, const AdamWOptions& opt, std::int64_t step);

// Gradient-norm clipping, the second half of torch.nn.utils.clip_grad_norm_ (clip_grads_with_norm_): given the
// squared 2-norm of every gradient of the model (a 1-element f32 tensor on the stream's device: sum_of_squares of
// each, added up, all-reduced across shards; reduce.hpp), scales `grad` (f32) in place by
//   coef = min(max_norm / (sqrt(squared_norm) + 1e-6), 1)
// all in f32 as PyTorch computes it on the device, so the host never reads the norm. As PyTorch's default
// (error_if_nonfinite=False), a NaN norm makes every gradient NaN and an infinite one scales them by 0. max_norm must
// be finite and > 0.
void clip_grad_with_norm(Stream s, const Tensor& grad, const Tensor& squared_norm, double max_norm);

}  // namespace fsdplab
