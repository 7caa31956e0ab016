// rmsnorm.hpp — root-mean-square normalisation over the last dimension, as Llama's LlamaRMSNorm
// (Zhang & Sennrich 2019): no mean subtracted, no bias,
//   out = x / sqrt(mean(x^2) + eps) * weight, per row.
//
// x, weight, out and the gradients share one dtype (f32 or bf16; computed in f32, each output rounded
// once, where Hugging Face's bf16 path rounds the normalised row before multiplying by the weight). The
// forward saves each row's rstd = 1 / sqrt(mean(x^2) + eps) in f32, which is all the backward needs
// besides x.
//
// What an op writes must not share memory with its other operands (an Error): no op here works in
// place.
#pragma once
#include "engine/runtime/device.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// x, out: [N, C]; weight: [C]; rstd: [N] f32. eps >= 0.
void rmsnorm(Stream s, const Tensor& x, const Tensor& weight, const Tensor& out, const Tensor& rstd, float eps);

// ADDS the gradients into dx [N, C] and dweight [C], as autograd accumulates; dweight is rounded once per
// element, so a bf16 gradient loses no more than that. dx gets the input's gradient rounded to its dtype
// first: added into a residual stream's gradient instead of zeros, it is bit for bit a separate add. With
// n = x * rstd and dn = weight * dout:  dx = rstd * (dn - n * mean(dn * n)),  dweight = sum over rows
// of dout * n.
void rmsnorm_backward(Stream s, const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dweight);

}  // namespace fsdplab
