// attention.hpp — causal multi-head self-attention, fused as in llm.c, with the numerics of
// PyTorch's F.scaled_dot_product_attention(q, k, v, is_causal=True).
//
// qkv [B, T, 3C] is the output of GPT-2's c_attn projection: q = qkv[..., 0:C], k = qkv[..., C:2C],
// v = qkv[..., 2C:3C], and head h of each is columns h*hd .. (h+1)*hd with hd = C / n_head. For
// each batch b and head h:
//   att[b, h] = softmax(q k^T / sqrt(hd), causal: query t sees keys 0..t)   [T, T], f32
//   out[b, :, h*hd:(h+1)*hd] = att[b, h] v
// qkv, out, dout and dqkv share one dtype (f32 or bf16; computed in f32); att keeps the
// probabilities in f32 for the backward (zeros above the diagonal).
//
// What an op writes must not share memory with its other operands (an Error): no op here works in
// place.
#pragma once
#include <cstdint>
#include <string_view>

#include "engine/runtime/device.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// The sizes in c_attn's layout qkv [B, T, 3C] with n_head heads of hd = C / n_head columns, checked (an Error
// naming `op` otherwise): what this op and flash_attention.hpp's both read.
struct QkvShape {
  std::int64_t B, T, C, n_head, hd;
};
QkvShape qkv_shape(std::string_view op, const Tensor& qkv, int n_head);

// qkv: [B, T, 3C]; out: [B, T, C]; att: [B, n_head, T, T] f32. n_head must divide C.
void attention(Stream s, const Tensor& qkv, const Tensor& out, const Tensor& att, int n_head);

// Writes the gradient into every element of dqkv [B, T, 3C] (whatever it held is never read), each rounded
// once, so a bf16 gradient loses no more than that.
void attention_backward(Stream s, const Tensor& dout, const Tensor& qkv, const Tensor& att, const Tensor& dqkv,
                        int n_head);

}  // namespace fsdplab
