// llama_model.hpp — a Llama 2 decoder (Touvron et al. 2023), as Hugging Face's LlamaForCausalLM: the
// same module tree, parameter names and layouts, with explicit forward and backward like gpt2_model.
//
//   model (LlamaModel)
//     embed_tokens  Embedding [V, C]
//     layers.0 .. layers.{L-1}  LlamaDecoderLayer, pre-norm:
//         x = x + self_attn(input_layernorm(x));  x = x + mlp(post_attention_layernorm(x))
//       self_attn  q_proj [H*hd, C], k_proj and v_proj [KV*hd, C], o_proj [C, H*hd], no biases;
//                  rotary position embeddings on q and k (rope.hpp), grouped-query attention: KV key/value
//                  heads, each shared by H / KV query heads (pack_qkv.hpp), causal softmax(q k^T / sqrt(hd)) v
//       mlp        down_proj(silu(gate_proj(x)) * up_proj(x)): gate_proj, up_proj [F, C], down_proj [C, F]
//       input_layernorm, post_attention_layernorm  RMSNorm [C] (rmsnorm.hpp)
//     norm  RMSNorm [C]
//   lm_head  Linear [V, C], not tied to embed_tokens; the loss is F.cross_entropy's mean
//
// Linear weights are nn.Linear's [out, in]. Initialisation as Hugging Face's LlamaPreTrainedModel
// (initializer_range 0.02): every Linear and Embedding weight normal(0, 0.02), every RMSNorm weight 1,
// each drawn from the counter-based RNG by its dotted name, so FSDP's meta init draws any shard alone.
// Activations and parameters are in the run's dtype; the attention's saved state (causal_attention.hpp) and
// the norms' statistics in f32. There is no KV cache, dropout or attention mask beyond causality: the lab trains on
// full sequences.
//
// What each step keeps per decoder layer on N = B*T tokens (a = activation bytes): the layer's input,
// input_layernorm's output, q, k, v after rotation, the attention output, the residual, the
// post-attention norm's output, gate, up, silu(gate)*up and the layer's output, and what the attention
// keeps in f32: the probabilities [B, H, T, T] with exact attention (f32's default), each query's log-sum-exp
// [B, H, T] with flash attention (bf16's default; LlamaConfig::attention); no activation checkpointing. See
// llama_memory in engine/nn/activation_memory.hpp for the count.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/nn/causal_attention.hpp"
#include "engine/nn/language_model_loss.hpp"
#include "engine/nn/model.hpp"

namespace fsdplab {

// The fields of Hugging Face's LlamaConfig that shape the model (same names); the defaults are
// Llama-2-7B's.
struct LlamaConfig {
  std::int64_t vocab_size = 32000;
  std::int64_t hidden_size = 4096;          // C
  std::int64_t intermediate_size = 11008;   // F, the MLP's width
  std::int64_t num_hidden_layers = 32;      // L
  std::int64_t num_attention_heads = 32;    // H
  std::int64_t num_key_value_heads = 32;    // KV (< H: grouped-query attention)
  std::int64_t max_position_embeddings = 4096;  // the context: the longest sequence
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.f;
  // Not Hugging Face's: which attention computes (causal_attention.hpp); the parameters do not depend on it.
  AttentionKind attention = AttentionKind::by_dtype;

  std::int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // An Error naming the first field out of range, what it must be and what it is.
  void validate() const;
};

// "test-tiny" (2 layers, 4 query heads sharing 2 key/value heads; a step in milliseconds on a CPU),
// "7b" (Llama-2-7B: C 4096, 32 layers, 32 heads and 32 kv heads, F 11008, V 32000, context 4096) and
// "70b" (Llama-2-70B: C 8192, 80 layers, 64 heads and 8 kv heads, F 28672, V 32000, context 4096).
const std::vector<std::string_view>& llama_preset_names();
// The preset's config; an Error listing the known names for any other.
LlamaConfig llama_preset(std::string_view name);

// Parameters of a model of this config, from the formula (tests check it against the built model):
// V*C (embed_tokens) + L * (C*H*hd + 2*C*KV*hd + H*hd*C + 3*C*F + 2*C) + C (norm) + V*C (lm_head).
std::int64_t llama_parameter_count(const LlamaConfig& config);

class LlamaDecoderStack;
class Linear;

class LlamaModel final : public Model {
 public:
  // Shapes only: no parameter gets a value here (the trainer or FSDP materialises them).
  explicit LlamaModel(const LlamaConfig& config);
  std::string_view kind() const override { return "LlamaForCausalLM"; }
  const LlamaConfig& config() const { return config_; }

  // batch.inputs and batch.targets: [B, T] i32 token ids, T <= max_position_embeddings. Returns the
  // mean cross-entropy over the B*T tokens.
  Tensor forward(RunContext& ctx, const Batch& batch) override;
  void backward(RunContext& ctx) override;
  // The token table (model.embed_tokens) alone: the positions are rotary, nothing learned.
  InputEmbeddingTables input_embedding_tables() override;
  bool set_input_embedding_gradient_sink(InputEmbeddingGradientSink* sink) override;

 private:
  LlamaConfig config_;
  LlamaDecoderStack& model_;
  Linear& lm_head_;
  LanguageModelLoss loss_;
};

}  // namespace fsdplab
