// silu_mul.hpp — the gated activation of Llama's SwiGLU MLP (Shazeer 2020), fused:
//   out = silu(gate) * up,   silu(g) = g * sigmoid(g) = g / (1 + exp(-g))
// which is Hugging Face's LlamaMLP `act_fn(gate_proj(x)) * up_proj(x)` between its projections.
//
// gate, up, out and the gradients share one dtype (f32 or bf16; computed in f32, each output rounded
// once, where Hugging Face's bf16 path rounds silu(gate) before the product). No output may overlap
// an input.
#pragma once
#include "engine/runtime/device.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// gate, up, out: one shape.
void silu_mul(Stream s, const Tensor& gate, const Tensor& up, const Tensor& out);

// Writes the gradients:
//   dgate = dout * up * silu'(gate),  silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g)))
//   dup   = dout * silu(gate)
void silu_mul_backward(Stream s, const Tensor& gate, const Tensor& up, const Tensor& dout, const Tensor& dgate,
                       const Tensor& dup);

}  // namespace fsdplab
