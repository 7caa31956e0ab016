// loss.hpp — the losses the lab models train on, with PyTorch's mean reduction. The loss is an f32
// tensor of one element; logits and predictions are f32 or bf16 (computed in f32), targets of the
// cross-entropy i32. The upstream gradient dloss is a float: 1 for the loss itself, or a scale
// (gradient accumulation over micro-batches passes 1 / steps).
//
// What an op writes must not share memory with its other operands (an Error), with one exception: the
// cross-entropy's backward may write the logits' gradient over the logits themselves.
#pragma once
#include <cstdint>

#include "engine/runtime/device.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// loss = mean over rows n of -log softmax(logits[n, :V])[targets[n]], as F.cross_entropy. logits: [N, Vp],
// whose first V = `vocab` columns are the classes; columns V..Vp-1 are a padded vocabulary's padding
// (Vp = V without one): masked, never read (see [Note: the padded vocabulary] in engine/nn/gpt2_model.hpp).
// targets: [N] i32, each in [0, V) (no ignore_index; one outside is an Error); loss: [1] f32.
// lse: [N] f32 receives each row's log-sum-exp for the backward. Saving it rather than the
// probabilities [N, V] keeps N * V floats (for GPT-2, V = 50257: as much again as the logits) out of
// activation memory, and costs the backward no extra pass: it reads the logits either way and gets
// softmax = exp(logit - lse) from them.
void cross_entropy(Stream s, const Tensor& logits, std::int64_t vocab, const Tensor& targets, const Tensor& loss,
                   const Tensor& lse);

// WRITES dlogits[:, :V] = (softmax(logits[:, :V]) - onehot(targets)) / N * dloss, and 0 into the padding
// columns. dlogits: [N, Vp] like the logits, and may be the logits themselves. Unlike the other backward ops,
// it does not add into its output: the logits' gradient is the step's largest activation ([N, Vp]), and
// writing it in place over the logits, which nothing reads after the loss, keeps one such buffer out of the
// backward's peak and saves zeroing and reading one (llm.c does the same).
void cross_entropy_backward(Stream s, const Tensor& logits, std::int64_t vocab, const Tensor& targets,
                            const Tensor& lse, float dloss, const Tensor& dlogits);

// loss = mean((pred - target)^2) over all elements, as F.mse_loss. pred and target: the same shape
// and dtype; loss: [1] f32.
void mse_loss(Stream s, const Tensor& pred, const Tensor& target, const Tensor& loss);

// ADDS 2 * (pred - target) / numel * dloss into dpred (callers zero it first), as autograd
// accumulates. No gradient for target, which is data.
void mse_loss_backward(Stream s, const Tensor& pred, const Tensor& target, float dloss, const Tensor& dpred);

}  // namespace fsdplab
