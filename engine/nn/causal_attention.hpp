// causal_attention.hpp — the fused attention op between an attention module's projections, and what it keeps
// for the backward. One object per attention module; GPT-2's and Llama's call it the same way.
//
// Two algorithms, the model's choice (AttentionKind, --attention):
//   exact  attention.hpp: the exact softmax, keeping the probabilities [B, NH, T, T] in f32;
//   flash  flash_attention.hpp: 64 x 64 tiles and an online softmax (on tensor cores in bf16), keeping the
//          log-sum-exp [B, NH, T] and the output (which the output projection keeps anyway: no extra memory).
// So flash attention's activations grow as T, not T^2, per head (activation_memory.cpp counts both). By default
// bf16 runs use flash attention, as FlashAttention and PyTorch's bf16 SDPA do, and f32 runs the exact path the
// numerics tests compare against; `--attention flash` in f32 is what PyTorch's f32 SDPA computes (an online
// softmax in f32, its memory-efficient kernel), for like-for-like speed.
#pragma once
#include <string>
#include <string_view>

#include "engine/nn/module.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

enum class AttentionKind { by_dtype, exact, flash };

// "auto" (by_dtype), "exact" or "flash"; an Error naming the three for anything else.
AttentionKind parse_attention_kind(std::string_view name);
std::string_view attention_kind_name(AttentionKind kind);

// Whether a model told `kind` attends with flash attention when it computes in `dtype` (else the exact op).
inline bool uses_flash_attention(AttentionKind kind, DType dtype) {
  return kind == AttentionKind::flash || (kind == AttentionKind::by_dtype && dtype == DType::bf16);
}

class CausalAttention {
 public:
  // `name` prefixes the saved tensors' names in the memory ledger (".att" or ".lse").
  CausalAttention(std::string name, int n_head, AttentionKind kind)
      : name_(std::move(name)), n_head_(n_head), kind_(kind) {}

  // y [B, T, C] = attention over qkv [B, T, 3C]; keeps what backward needs.
  void forward(RunContext& ctx, const Tensor& qkv, const Tensor& y);
  // Writes the gradient through the attention into every element of dqkv (so it needs no zeroing), given
  // the qkv of the forward, then frees what the forward kept.
  void backward(RunContext& ctx, const Tensor& dy, const Tensor& qkv, const Tensor& dqkv);

 private:
  std::string name_;
  int n_head_;
  AttentionKind kind_;
  Tensor att_;  // exact: the probabilities
  Tensor lse_;  // flash: each query's log-sum-exp
  Tensor out_;  // flash: the forward's output y
};

}  // namespace fsdplab
