#include "engine/nn/activation_memory.hpp"

#include <algorithm>

#include "engine/nn/causal_attention.hpp"
#include "engine/nn/gpt2_model.hpp"
#include "engine/nn/llama_model.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {

// A, what one attention module keeps for its backward (causal_attention.hpp): exact attention the probabilities
// [B,H,T,T] in f32, 4·B·H·T²; flash attention each query's log-sum-exp [B,H,T] in f32, 4·B·H·T, beside the
// attention output that the output projection keeps anyway.
namespace {
std::int64_t attention_saved_bytes(std::int64_t B, std::int64_t H, std::int64_t T, bool flash) {
  return flash ? 4 * B * H * T : 4 * B * H * T * T;
}
}  // namespace

// GPT-2 on N = B·T tokens, activations of a bytes (the run's dtype), C = n_embd, H = n_head, L = n_layer,
// V = the padded vocabulary, the logits' width ([Note: the padded vocabulary], gpt2_model.hpp). No tensor
// outlives the step's backward, so the activation peak is the largest live sum over the step. Who holds what
// (gpt2_model.cpp, layers.cpp):
//
//   batch          input and target ids, i32, held by the trainer for the whole step         8N
//   embeddings     wte's output, wpe's rows added in place; Block 0's ln_1 input             N·C·a
//   each Block     ln_1 out (c_attn's input), qkv [N,3C], the attention output (c_proj's
//   (saved for     input), the residual h (ln_2's input), ln_2 out (c_fc's input), c_fc's out
//    backward)     [N,4C], gelu's out [N,4C] (c_proj's input), the block's output (the next
//                  block's or ln_f's input): 16·N·C·a; what the attention keeps, A (below);
//                  ln_1's and ln_2's mean and rstd in f32: 16N                                S_blk
//   ln_f           its output (lm_head's input) and its mean and rstd                        N·C·a + 8N
//   lm_head, loss  logits [N,V], cross-entropy's lse [N] f32, the loss [1] f32               N·V·a + 4N + 4
//
// Transients (an op's output, freed once its consumer has added it in) sit on top of what is saved.
// With base = 8N + N·C·a + L·S_blk, every moment of the step holds at most one of these (checked
// allocation by allocation; the loss's 4 bytes live from the forward's end to the step's end):
//   backward start     base + N·C·a + 8N + N·V·a + 4N + 4      dlogits [N,V], written over the logits
//   lm_head backward   base + 2·N·C·a + 8N + N·V·a + 4         its dx beside dlogits (lse freed)
//   last Block's       base + 5·N·C·a + 4                      the Block's output freed, lm_head's dx (held
//     backward                                                 by GPT2Model.backward to its end) and ln_f's dx
//                                                              live, then mlp.c_proj's dx [N,4C] beside
//                                                              gelu's output, freed just after
// Each later Block's backward starts S_blk lower (the finished one freed its saved tensors).
ModelMemory gpt2_memory(const Gpt2Config& config, std::int64_t batch, std::int64_t seq, DType dtype) {
  config.validate();
  check(batch >= 1 && seq >= 1 && seq <= config.n_positions, "gpt2 memory: ", batch, " rows of ", seq,
        " tokens; expected at least one row of 1 to n_positions = ", config.n_positions, " tokens");
  const std::int64_t a = static_cast<std::int64_t>(dtype_size(dtype));
  const std::int64_t B = batch, T = seq, N = B * T, C = config.n_embd, H = config.n_head, L = config.n_layer,
                     V = config.padded_vocab_size();
  const bool flash = uses_flash_attention(config.attention, dtype);
  const std::int64_t block = 16 * N * C * a + attention_saved_bytes(B, H, T, flash) + 16 * N;
  const std::int64_t base = 8 * N + N * C * a + L * block;
  const std::int64_t peak = base + std::max({N * C * a + 8 * N + N * V * a + 4 * N + 4,
                                             2 * N * C * a + 8 * N + N * V * a + 4,
                                             5 * N * C * a + 4});
  return {peak};
}

// Llama on N = B·T tokens, activations of a bytes, C = hidden_size, F = intermediate_size, H query heads,
// K = KV·hd the width of k and v, L layers, V = vocab_size. As for GPT-2, nothing outlives the step's
// backward, so the activation peak is the largest live sum over the step. Who holds what
// (llama_model.cpp, layers.cpp):
//
//   batch          input and target ids, i32, held by the trainer for the whole step          8N
//   embeddings     embed_tokens' output, layer 0's input                                      N·C·a
//   each layer     input_layernorm's output (q, k, v_proj's input), q and k after their
//   (saved for     in-place rotation, v [N,K] each, the attention output (o_proj's input),
//    backward)     the residual h (post_attention_layernorm's input), its norm's output
//                  (gate and up_proj's input), gate [N,F], up [N,F], silu(gate)·up [N,F]
//                  (down_proj's input), the layer's output (the next layer's or norm's input):
//                  N·a·(6C + 2K + 3F); what the attention keeps, A (above gpt2_memory);
//                  the two norms' rstd in f32: 8N                                              S_layer
//   norm           its output (lm_head's input) and rstd                                      N·C·a + 4N
//   lm_head, loss  logits [N,V], cross-entropy's lse [N] f32, the loss [1] f32                N·V·a + 4N + 4
//
// With base = 8N + N·C·a + L·S_layer, the step peaks at the largest of these moments (the forward's
// transients all sit below the first; the last layer's backward starts S_layer above every other's):
//   backward start     base + N·C·a + 8N + N·V·a + 4          dlogits [N,V], written over the logits
//   lm_head backward   base + 2·N·C·a + 4N + N·V·a + 4        its dx beside dlogits (lse freed)
//   last layer's MLP   base + N·C·a + 3·N·F·a + 4             its output freed; lm_head's dx, norm's dx
//     backward                                                and dgate, dup, down_proj's dx [N,F] beside
//                                                             gate, up and their product
//   last layer's       base + N·a·(5C - 3F) - 4N + 4          the MLP's tensors and h gone; dqkv [N,3C]
//     attention          (+ N·C·a with flash attention, whose  and q, k, v packed again [N,3C]; the residual
//                        backward reads the attention output)  stream's gradient takes the norm's in place
//                                                              (only wins where 2C > 3F)
ModelMemory llama_memory(const LlamaConfig& config, std::int64_t batch, std::int64_t seq, DType dtype) {
  config.validate();
  check(batch >= 1 && seq >= 1 && seq <= config.max_position_embeddings, "llama memory: ", batch, " rows of ", seq,
        " tokens; expected at least one row of 1 to max_position_embeddings = ", config.max_position_embeddings,
        " tokens");
  const std::int64_t a = static_cast<std::int64_t>(dtype_size(dtype));
  const std::int64_t B = batch, T = seq, N = B * T, C = config.hidden_size, F = config.intermediate_size,
                     H = config.num_attention_heads, K = config.num_key_value_heads * config.head_dim(),
                     L = config.num_hidden_layers, V = config.vocab_size;
  const bool flash = uses_flash_attention(config.attention, dtype);
  const std::int64_t layer = N * a * (6 * C + 2 * K + 3 * F) + attention_saved_bytes(B, H, T, flash) + 8 * N;
  const std::int64_t kept_output = flash ? N * C * a : 0;
  const std::int64_t base = 8 * N + N * C * a + L * layer;
  const std::int64_t peak = base + std::max({N * C * a + 8 * N + N * V * a + 4,
                                             2 * N * C * a + 4 * N + N * V * a + 4,
                                             N * C * a + 3 * N * F * a + 4,
                                             N * a * (5 * C - 3 * F) - 4 * N + 4 + kept_output});
  return {peak};
}

ModelMemory model_memory(const Module& model, std::int64_t batch, std::int64_t seq, DType dtype) {
  if (const auto* gpt2 = dynamic_cast<const Gpt2Model*>(&model)) return gpt2_memory(gpt2->config(), batch, seq, dtype);
  if (const auto* llama = dynamic_cast<const LlamaModel*>(&model))
    return llama_memory(llama->config(), batch, seq, dtype);
  fail("memory model: the activations of model '", model.kind(), "' are not counted; it covers gpt2 and llama");
}

}  // namespace fsdplab
