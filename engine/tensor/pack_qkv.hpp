// pack_qkv.hpp — grouped-query attention (Ainslie et al. 2023) on the fused attention op: queries,
// and keys and values with fewer heads, packed into the [B, T, 3C] layout attention() reads, each key
// and value head repeated for the query heads that share it.
//
// q is [B, T, C] with C = H * hd (H query heads); k and v are [B, T, KV * hd] with KV key/value heads,
// KV dividing H. With R = H / KV, query head h reads key/value head h / R, as Hugging Face's repeat_kv
// expands [B, KV, T, hd] to [B, KV * R, T, hd]:
//   qkv[b, t, 0C + h*hd + i] = q[b, t, h*hd + i]
//   qkv[b, t, 1C + h*hd + i] = k[b, t, (h / R)*hd + i]
//   qkv[b, t, 2C + h*hd + i] = v[b, t, (h / R)*hd + i]
// KV = H is plain multi-head attention. All tensors share one dtype (f32 or bf16); the forward moves
// bits, the backward sums in f32 and rounds once.
//
// What an op writes must not share memory with its other operands (an Error).
#pragma once
#include "engine/runtime/device.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// q: [B, T, H * hd]; k, v: [B, T, KV * hd]; qkv: [B, T, 3 * H * hd].
void pack_qkv(Stream s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv, int n_heads,
              int n_kv_heads);

// Writes the gradients: dq = the q part of dqkv; dk and dv = the k and v parts summed over the R query
// heads that repeated each key/value head.
void pack_qkv_backward(Stream s, const Tensor& dqkv, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                       int n_heads, int n_kv_heads);

}  // namespace fsdplab
