// baseline_parameters.hpp — the single-rank baseline's parameters, in one flat buffer as FSDP at W = 1
// holds them (a FlatParameter per unit, flat_parameter.hpp).
//
// Every parameter's value and gradient is a view of one flat f32 buffer, so a step costs one zeroing of
// the gradients and one optimizer op for the whole model, not one per parameter: on a GPU each op is a
// kernel launch, and a GPT-2 small step would otherwise launch 148 fills before its forward.
//
// In bf16 mixed precision, as torch.autocast with a fused AdamW (and FSDP's MixedPrecision at W = 1)
// trains, the f32 buffers are the master weights: the values between steps, what the optimizer updates and
// --save-final writes. For one step the model computes with bf16 copies cast from them, and the bf16
// gradients its backward adds up are widened into the f32 gradients the f32 optimizer step reads: one cast
// and one widening for the whole model.
//
// The buffers and their tags in the memory ledger, FSDP's at W = 1:
//   f32 values      param_shard  one rank's shard is the whole model
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

class BaselineParameters {
 public:
  // Each parameter starts this many elements into the flat buffers: 16 bytes of bf16, which the cuda
  // kernels' packed loads want. The gaps stay zero.
  static constexpr std::int64_t kAlign = 8;

  // Allocates the flat f32 values (zeroed) and gradients, and in bf16 the copies' buffers (not yet their
  // memory), and points each Parameter::value and grad at its f32 views: the values are then written by
  // the host (init_values, load_checkpoint). `compute`: f32, or bf16 for mixed precision.
  BaselineParameters(Module& model, Device& device, DType compute);

  // The whole model's f32 values and their gradients, one tensor each: the optimizer's one target.
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }

  // Before a step's forward, on `stream`: zeroes the gradients the backward adds into, in one op. In bf16
  // it first allocates the copies, casts the values into them, and points every parameter at its bf16 value
  // and gradient, which the model's forward reads and its backward adds into.
  void begin_step(Stream stream);
  // After the backward, on the same stream. In bf16: overwrites the f32 gradients with the bf16 ones
  // widened, points every parameter back at its f32 value and gradient, and frees the copies
  // (stream-ordered: the ops already issued still read them). In f32 there is nothing to do.
  void end_backward(Stream stream);

 private:
  bool mixed() const { return copies_.defined(); }

  struct Views {
    Parameter* param;
    Tensor value, grad, copy, copy_grad;
  };
  Tensor values_, grads_, copies_, copy_grads_;
  std::vector<Views> views_;
};

}  // namespace fsdplab
