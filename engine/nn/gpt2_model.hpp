// gpt2_model.hpp — GPT-2, exactly Hugging Face's GPT2LMHeadModel: the same module tree, parameter
// names, layouts and numerics, so a state dict moves between the two unchanged.
//
//   transformer (GPT2Model)
//     wte  Embedding [V, C]        token embeddings, also the LM head's weight (tied); stored [Vp, C]
//     wpe  Embedding [P, C]        learned position embeddings
//     h.0 .. h.{L-1}  Block, pre-LN:  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
//       ln_1, ln_2  LayerNorm
//       attn.c_attn  Conv1D C -> 3C (q, k, v side by side), fused causal attention, attn.c_proj C -> C
//       mlp.c_fc     Conv1D C -> 4C, gelu (tanh), mlp.c_proj 4C -> C
//     ln_f  LayerNorm
//   lm_head  logits = x wte^T, with no parameter of its own; the loss is F.cross_entropy's mean
//
// [Note: the padded vocabulary]
// GPT-2's V = 50257 is odd, so every GEMM of the LM head has a leading dimension of 50257 elements:
// logits [N, V] forward, dlogits [N, V] in both backward GEMMs. Their rows do not start on 16-byte
// boundaries, and cuBLAS picks older, slower kernels for them (on an H100 in bf16 the three ran as
// cutlass_75 GEMMs, 8.5 ms of a 63 ms step: docs/PERFORMANCE.md). As llm.c does, wte is stored with
// Vp = V rounded up to a multiple of 128 rows (50304), the last Vp - V rows zero:
//   - the LM head computes logits [N, Vp]; the padding columns are x · 0 = 0;
//   - the cross-entropy reads the first V columns of each row only, so the padding is masked out of
//     the softmax, and its backward writes 0 into the padding columns of dlogits;
//   - so wte's padding rows get a zero gradient from the LM head, and none from the embedding (token
//     ids are < V): AdamW and SGD keep them 0 (0 moments, 0 decay) for the whole run.
// The model's numbers are the unpadded model's: the same losses and gradients. What changes is storage:
// the parameter is [Vp, C] in memory, in FlatParameters and in sharded checkpoints, while files that
// name parameters (checkpoint folders, Hugging Face's) hold [V, C] (Parameter::logical_shape).
//
// Conv1D stores its weight [in, out] (WeightLayout::in_out). No dropout: the lab trains without it,
// and GPT2LMHeadModel in eval mode computes the same. Every module brackets its forward and
// backward with the hook calls, so FSDP can wrap each Block as a unit; `h` is a container, like
// nn.ModuleList, and is never called itself.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/nn/causal_attention.hpp"
#include "engine/nn/language_model_loss.hpp"
#include "engine/nn/model.hpp"

namespace fsdplab {

// The fields of Hugging Face's GPT2Config that shape the model; the defaults are GPT-2 small's.
struct Gpt2Config {
  std::int64_t vocab_size = 50257;
  std::int64_t n_positions = 1024;  // the context: the longest sequence
  std::int64_t n_embd = 768;        // d_model, C
  std::int64_t n_head = 12;
  std::int64_t n_layer = 12;
  float layer_norm_epsilon = 1e-5f;
  // Not Hugging Face's: wte's rows in storage are vocab_size rounded up to a multiple of this. See
  // [Note: the padded vocabulary]. The test presets set 64: their vocabularies (64, 256) need no padding.
  std::int64_t vocab_multiple = 128;
  // Not Hugging Face's either: which attention computes (causal_attention.hpp); the parameters do not depend on it.
  AttentionKind attention = AttentionKind::by_dtype;

  std::int64_t padded_vocab_size() const { return (vocab_size + vocab_multiple - 1) / vocab_multiple * vocab_multiple; }
  // An Error naming the first field out of range, what it must be and what it is.
  void validate() const;
};

// "test-tiny" (fast on a CPU, for unit tests), "test-small" (a few seconds of training on a CPU),
// and Hugging Face's "gpt2" (124M), "gpt2-medium" (355M), "gpt2-large" (774M), "gpt2-xl" (1.5B).
const std::vector<std::string_view>& gpt2_preset_names();
// The preset's config; an Error listing the known names for any other.
Gpt2Config gpt2_preset(std::string_view name);

class Gpt2Transformer;
class Gpt2LmHead;

class Gpt2Model final : public Model {
 public:
  // Shapes only: no parameter gets a value here (the trainer or FSDP materialises them).
  explicit Gpt2Model(const Gpt2Config& config);
  std::string_view kind() const override { return "GPT2LMHeadModel"; }
  const Gpt2Config& config() const { return config_; }

  // batch.inputs and batch.targets: [B, T] i32 token ids, T <= n_positions. Returns the mean
  // cross-entropy over the B*T tokens.
  Tensor forward(RunContext& ctx, const Batch& batch) override;
  void backward(RunContext& ctx) override;
  InputEmbeddingTables input_embedding_tables() override;
  bool set_input_embedding_gradient_sink(InputEmbeddingGradientSink* sink) override;

 private:
  Gpt2Config config_;
  Gpt2Transformer& transformer_;
  Gpt2LmHead& lm_head_;
  LanguageModelLoss loss_;
};

}  // namespace fsdplab
