// elementwise.hpp — the memory-bound ops between the GEMMs: bias, activations, residual adds,
// scaling, casts and copies.
//
// Float operands are f32 or bf16, all of one dtype unless an op says otherwise; values are computed
// in f32 and bf16 results rounded to nearest even. An output may be one of the inputs itself (in
// place) but must not partly overlap one. Each op costs a few FLOPs per element and is bound by the
// bytes it reads and writes.
//
// Every *_backward op ADDS into its gradient output (dx += ..., as PyTorch's autograd accumulates),
// so gradients flowing into one tensor from several uses sum up; callers zero gradient buffers first.
// (gelu_backward_in_place overwrites instead: see it below.)
#pragma once
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// out[N, C] = x[N, C] + bias[C] (broadcast over rows); out may be x.
void bias_add(Stream s, const Tensor& x, const Tensor& bias, const Tensor& out);
// dbias[C] += column sums of dout[N, C].
void bias_backward(Stream s, const Tensor& dout, const Tensor& dbias);

// GELU, tanh approximation, exactly PyTorch's gelu(approximate='tanh'):
//   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void gelu(Stream s, const Tensor& x, const Tensor& out);
// dx += dout * gelu'(x), where x is the forward input.
void gelu_backward(Stream s, const Tensor& x, const Tensor& dout, const Tensor& dx);
// d = d * gelu'(x), overwriting the output's gradient d with the input's: bit for bit gelu_backward into a
// zeroed dx (a zero's sign aside), without the zeroed buffer (a pass to write it, one to read it back).
void gelu_backward_in_place(Stream s, const Tensor& x, const Tensor& d);

void relu(Stream s, const Tensor& x, const Tensor& out);
// dx += dout where x > 0. x is the forward input; its output does as well (positive at the same places).
void relu_backward(Stream s, const Tensor& x, const Tensor& dout, const Tensor& dx);

// out = a + b (the residual connection); shapes equal.
void add(Stream s, const Tensor& a, const Tensor& b, const Tensor& out);
// out = alpha * x.
void scale(Stream s, const Tensor& x, float alpha, const Tensor& out);
// out += alpha * x, into an f32 accumulator: out is f32, x f32 or bf16 of out's shape (torch's
// out.add_(x, alpha=alpha)); x widened and the product added in f32, rounding once.
void add_scaled(Stream s, const Tensor& x, float alpha, const Tensor& out);

// out = in converted between f32 and bf16 (either way, or the same dtype as a copy); shapes equal.
// f32 -> bf16 rounds to nearest, ties to even, as PyTorch's .to(torch.bfloat16).
void cast(Stream s, const Tensor& in, const Tensor& out);
// Every element of t = value (rounded once for bf16).
void fill(Stream s, const Tensor& t, float value);
// dst = src, byte for byte: same dtype (any, i32 too) and element count; shapes may differ.
void copy(Stream s, const Tensor& src, const Tensor& dst);

}  // namespace fsdplab
