// flash_attention.hpp — causal multi-head self-attention as FlashAttention-2 computes it (Dao 2023): the
// scores of one 64-query tile against one 64-key tile at a time, an online softmax, and no T x T matrix in
// memory. What the forward keeps for the backward is the log-sum-exp of each query's scores, [B, NH, T]
// floats, where attention.hpp keeps the probabilities, [B, NH, T, T]: at GPT-2's T = 1024 that is 1024 times
// less. The backward recomputes the probabilities from q, k and that log-sum-exp.
//
// The operands are bf16 (the products run on tensor cores) or f32 (plain f32 fused multiply-adds, as PyTorch's
// memory-efficient f32 attention computes); which attention a model runs is its choice (causal_attention.hpp),
// and attention.hpp's exact softmax stays what the numerics tests compare against. Same layout as attention.hpp:
// qkv [B, T, 3C] is c_attn's output, head h of q, k and v in columns h*hd .. (h+1)*hd of each third, out
// [B, T, C]; hd = C / n_head is at most 128 in bf16, 64 in f32 (kFlashMaxHeadDim, kFlashMaxHeadDimF32).
//
// [Note: the flash attention arithmetic]
// Both bodies, the host's and the GPU's, compute exactly this, tile by tile (kFlashTile rows); they differ
// only in the order of the sums inside a tile. With s_tk = (q_t . k_k) / sqrt(hd) in f32 from the stored
// operands, for keys k <= t only:
//   forward, query t, key tiles in order:  m' = max(m, max_k s_tk);  c = exp(m - m')  (0 on the first tile);
//                                          p_tk = exp(s_tk - m');  l = c l + sum_k p_tk;
//                                          acc = c acc + sum_k bf16(p_tk) v_k
//                                          out_t = stored(acc / l);  lse_t = m + log(l)
//   backward:  D_t = dout_t . out_t (the stored out);  p_tk = exp(s_tk - lse_t);  dp_tk = dout_t . v_k;
//              ds_tk = p_tk (dp_tk - D_t)
//              dv_k += sum_{t>=k} bf16(p_tk) dout_t;  dk_k += sum_{t>=k} bf16(ds_tk) q_t / sqrt(hd);
//              dq_t += sum_{k<=t} bf16(ds_tk) k_k / sqrt(hd)
// bf16(.) marks where a tensor-core product takes a rounded operand, as FlashAttention's kernels do; in an f32
// run it is the value itself. So the host body (flash_attention_host.hpp) is the GPU kernels' twin, and the
// sim device trains with the numerics a GPU run has. Each element of dqkv is rounded once to its dtype, after
// the sum. No sum is added atomically, so a rerun is bit-exact: the bf16 kernels split the backward in two
// passes (one over key tiles for dk, dv; one over query tiles for dq), and the f32 pass over key tiles adds
// each key tile's part of dq in key order ([Note: dq in key-tile order] in flash_attention_kernels.cu), which
// decides the order of the tiles in the host's sums too.
//
// What an op writes must not share memory with its other operands (an Error).
#pragma once
#include "engine/runtime/device.hpp"
#include "engine/tensor/flash_attention_host.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// qkv: [B, T, 3C] bf16 or f32; out: [B, T, C] of qkv's dtype; lse: [B, n_head, T] f32. n_head must divide C.
void flash_attention(Stream s, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head);

// Writes the gradient into every element of dqkv [B, T, 3C] of qkv's dtype (whatever it held is never read);
// out and lse are the forward's.
void flash_attention_backward(Stream s, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& dqkv, int n_head);

}  // namespace fsdplab
