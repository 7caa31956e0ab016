// baseline_mixed_precision.hpp — bf16 mixed precision for the single-rank baseline, as torch.autocast with a
// fused AdamW (and FSDP's MixedPrecision at W = 1) trains: the f32 master weights stay each parameter's value
// between steps, the tensors the optimizer updates and --save-final writes; for one step the model computes
// with bf16 copies cast from them, and the bf16 gradients its backward adds up are widened into the f32
// gradients the f32 optimizer step reads.
//
// Every parameter lives in one flat buffer, as a FlatParameter holds a unit's (flat_parameter.hpp), so a step
// costs one cast, one zeroing, one widening and one optimizer op for the whole model, not one per parameter:
// on a GPU each op is a kernel launch, and a few hundred of them would take longer than the casts' bytes.
// The buffers and their tags in the memory ledger, FSDP's at W = 1:
//   f32 masters     param_shard  one rank's shard is the whole model (materialize.hpp tags it so too)
//   f32 gradients   grad_shard
//   bf16 copies     param_full   allocated by the cast, freed after the widening, as a gathered unit
//   bf16 gradients  grad_full
// FSDP casts and widens a unit's flat buffer the same way (unit_lifecycle.cpp: `gather` casts the f32 shard
// to param_dtype, `reduce_gradient` widens the bf16 gradient to reduce_dtype).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/nn/module.hpp"

namespace fsdplab {

class MixedPrecisionParameters {
 public:
  // Each parameter starts this many elements into the flat buffers: 16 bytes of bf16, which the cuda
  // kernels' packed loads want. The gaps stay zero.
  static constexpr std::int64_t kAlign = 8;

  // Allocates the flat f32 masters (zeroed) and gradients, and the bf16 copies' buffers (not yet their
  // memory), and points each Parameter::value and grad at its f32 views: the values are then written by
  // the host (init_values, load_checkpoint). `compute`: bf16 (f32 needs no copies).
  MixedPrecisionParameters(Module& model, Device& device, DType compute);

  // The whole model's f32 masters and their gradients, one tensor each: the optimizer's one target.
  const Tensor& masters() const { return masters_; }
  const Tensor& master_grads() const { return master_grads_; }

  // Before a step's forward, on `stream`: allocates the bf16 copies, casts the masters into them, zeroes the
  // bf16 gradients (the step's zero_grads, in one op), and points every parameter at its bf16 value and
  // gradient, which the model's forward reads and its backward adds into.
  void cast_for_step(Stream stream);
  // After the backward, on the same stream: overwrites the f32 gradients with the bf16 ones widened, points
  // every parameter back at its f32 master and gradient, and frees the copies (stream-ordered: the ops
  // already issued still read them).
  void widen_gradients(Stream stream);

 private:
  struct Views {
    Parameter* param;
    Tensor master, master_grad, copy, copy_grad;
  };
  Tensor masters_, master_grads_, copies_, copy_grads_;
  std::vector<Views> views_;
};

}  // namespace fsdplab
