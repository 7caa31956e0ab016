// rope.hpp — rotary position embeddings (Su et al., RoFormer 2021), as Hugging Face's Llama applies
// them to queries and keys (apply_rotary_pos_emb with rotate_half):
//
// x is [B, T, H * hd]: row (b, t) holds H heads of hd columns each (hd even), as q_proj's output
// before it is viewed [B, T, H, hd]. The token at t has position t. Within a head, element i and
// element i + hd/2 (i < hd/2) form a pair rotated by the angle t * theta^(-2i / hd):
//   out[i]        = x[i] cos - x[i + hd/2] sin
//   out[i + hd/2] = x[i + hd/2] cos + x[i] sin
// The inverse frequencies, angles, cosines and sines are computed in f32 in Hugging Face's order
// (1 / theta^(2i/hd), then t * that, then cos and sin). x, out and the gradients share one dtype (f32
// or bf16; computed in f32, rounded once).
#pragma once
#include "engine/runtime/device.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// x, out: [B, T, n_heads * hd] with hd even; out may be x itself (in place) but must not partly
// overlap it. theta > 0 (Llama: 10000).
void rope(Stream s, const Tensor& x, const Tensor& out, int n_heads, float theta);

// Writes the gradient into dx: the rotation is orthogonal, so dx = the rotation of dout by the opposite
// angle. dx may be dout itself (in place) but must not partly overlap it.
void rope_backward(Stream s, const Tensor& dout, const Tensor& dx, int n_heads, float theta);

}  // namespace fsdplab
