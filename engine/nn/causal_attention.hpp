// causal_attention.hpp — the fused attention op between an attention module's projections, and what it keeps
// for the backward. One object per attention module; GPT-2's and Llama's call it the same way.
//
// The algorithm follows the run's dtype:
//   f32   attention.hpp: the exact softmax, keeping the probabilities [B, NH, T, T] in f32;
//   bf16  flash_attention.hpp: tensor-core tiles and an online softmax, keeping the log-sum-exp [B, NH, T]
//         and the output (which the output projection keeps anyway, so it costs no memory).
// So a bf16 run's activations grow as T, not T^2, per head (memory_model.cpp counts both), while f32 keeps
// the exact path the numerics tests compare against.
#pragma once
#include <string>

#include "engine/nn/module.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// Whether a run computing in `dtype` attends with flash attention (else the exact op).
inline bool uses_flash_attention(DType dtype) { return dtype == DType::bf16; }

class CausalAttention {
 public:
  // `name` prefixes the saved tensors' names in the memory ledger (".att" or ".lse").
  CausalAttention(std::string name, int n_head) : name_(std::move(name)), n_head_(n_head) {}

  // y [B, T, C] = attention over qkv [B, T, 3C]; keeps what backward needs.
  void forward(RunContext& ctx, const Tensor& qkv, const Tensor& y);
  // Writes the gradient through the attention into every element of dqkv (so it needs no zeroing), given
  // the qkv of the forward, then frees what the forward kept.
  void backward(RunContext& ctx, const Tensor& dy, const Tensor& qkv, const Tensor& dqkv);

 private:
  std::string name_;
  int n_head_;
  Tensor att_;  // f32: the probabilities
  Tensor lse_;  // bf16: each query's log-sum-exp
  Tensor out_;  // bf16: the forward's output y
};

}  // namespace fsdplab
