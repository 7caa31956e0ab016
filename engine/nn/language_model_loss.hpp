// language_model_loss.hpp — the loss at the top of a causal language model: the token batch's checks, the mean
// cross-entropy of the next token over the LM head's logits (F.cross_entropy), what it keeps for the backward,
// and the backward into the logits' gradient. One object per model; GPT-2's and Llama's call it the same way,
// so each model's forward and backward read as their modules: embed, blocks, head, loss.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "engine/nn/model.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

class LanguageModelLoss {
 public:
  // `model` prefixes the errors ("gpt2"); the logits' first `vocab_size` columns are the classes (a padded
  // vocabulary's padding after them is masked: [Note: the padded vocabulary] in gpt2_model.hpp).
  LanguageModelLoss(std::string model, std::int64_t vocab_size) : model_(std::move(model)), vocab_size_(vocab_size) {}

  // Refuses, naming what came, a batch that is not [B, T] i32 token ids with i32 targets of the same shape and
  // T <= max_positions (the config field `positions_field`). A model calls it before its forward hooks run, so a
  // bad batch errors before FSDP gathers anything.
  void check_batch(const Batch& batch, std::int64_t max_positions, std::string_view positions_field) const;

  // The mean cross-entropy [1] f32 of logits [B*T, Vp] against targets [B, T]; keeps the logits, the targets and
  // each row's log-sum-exp for the backward.
  Tensor forward(RunContext& ctx, const Tensor& logits, const Tensor& targets);

  // Refuses a backward with no forward before it. A model calls it before its backward hooks run.
  void expect_forward() const;
  // The gradient of the loss (times ctx.loss_scale) with respect to the logits, [B*T, Vp] (the largest activation
  // of a step: the caller drops it as soon as the head's backward has read it); frees what the forward kept.
  // It is written over the logits, in place: nothing reads the logits after the loss, so the backward never
  // holds two [B*T, Vp] buffers (the activation count's "backward start" moment, engine/nn/activation_memory.cpp).
  Tensor backward(RunContext& ctx);

 private:
  std::string model_;
  std::int64_t vocab_size_;
  Tensor logits_, targets_, lse_;  // saved for backward
};

}  // namespace fsdplab
