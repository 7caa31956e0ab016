// model.hpp — what the trainer (and FSDP) sees of a model: a root module whose forward takes a
// batch and returns the loss, and whose backward runs from that loss.
#pragma once
#include <string>

#include "engine/nn/module.hpp"

namespace fsdplab {

// One rank's slice of a step's global batch. gpt2: inputs and targets [B, T] i32 token ids;
// toy and mlp: inputs [B, in] and targets [B, out] in the run's dtype.
struct Batch {
  Tensor inputs;
  Tensor targets;
};

class Model : public Module {
 public:
  // The mean loss over this rank's rows, a [1] f32 tensor (on the device; synchronise to read it).
  virtual Tensor forward(RunContext& ctx, const Batch& batch) = 0;
  // Gradients of the last forward's loss, added into every Parameter::grad.
  virtual void backward(RunContext& ctx) = 0;

 protected:
  Model() : Module("") {}
};

}  // namespace fsdplab
