// layernorm.hpp — layer normalisation over the last dimension, as PyTorch's nn.LayerNorm:
//   out = (x - mean) / sqrt(var + eps) * weight + bias, per row, var biased (divided by C).
//
// x, weight, bias, out and the gradients share one dtype (f32 or bf16; computed in f32). The
// forward saves each row's mean and rstd = 1 / sqrt(var + eps) in f32, which is all the backward
// needs besides x: the normalised row is recomputed rather than stored.
//
// What an op writes must not share memory with its other operands (an Error): no op here works in
// place.
#pragma once
#include "engine/runtime/device.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// x, out: [N, C]; weight, bias: [C]; mean, rstd: [N] f32.
void layernorm(Stream s, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
               const Tensor& mean, const Tensor& rstd, float eps = 1e-5f);

// ADDS the gradients into dx [N, C], dweight [C] and dbias [C], as autograd accumulates; dweight and dbias
// are rounded once per element, so a bf16 gradient loses no more than that. dx gets the input's gradient
// rounded to its dtype first: added into a residual stream's gradient instead of zeros, it is bit for bit
// a separate add (LayerNorm::backward_adding_to).
void layernorm_backward(Stream s, const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias);

}  // namespace fsdplab
