// model.hpp — what the trainer (and FSDP) sees of a model: a root module whose forward takes a
// batch and returns the loss, and whose backward runs from that loss.
#pragma once

#include "engine/nn/module.hpp"

namespace fsdplab {

// One rank's slice of a step's global batch. gpt2 and llama: inputs and targets [B, T] i32 token ids;
// toy and mlp: inputs [B, in] and targets [B, out] in the run's dtype.
struct Batch {
  Tensor inputs;
  Tensor targets;
};

// The gradient a backward computed for a model's input embeddings, before it is added into the tables' gradients:
// row ids[b, t] of the token table gains dx[b, t], and so does row t of the position table where the model has one
// (GPT-2's wte[ids] + wpe[0 .. T); Llama's embed_tokens[ids] alone, its positions rotary).
struct InputEmbeddingGradient {
  Parameter& token_table;     // [V, C]
  Parameter* position_table;  // [P, C], P >= T; null for a model without one
  Tensor ids;                 // [B, T] i32, the forward's
  Tensor dx;                  // [B, T, C] in the run's dtype
};

// Takes that gradient from a model's backward to place it elsewhere: FSDP's `--embedding-grad rows`
// ([Note: the embedding's gradient as rows], engine/fsdp/unit_lifecycle.cpp) all-gathers the rows and adds
// the ones of each rank's shard, rather than reducing the tables' whole gradients.
class InputEmbeddingGradientSink {
 public:
  virtual ~InputEmbeddingGradientSink() = default;
  // True when the sink placed the gradient; false to have the model add it into the tables' gradients
  // as it does without a sink.
  virtual bool take(RunContext& ctx, const InputEmbeddingGradient& grad) = 0;
};

class Model : public Module {
 public:
  // The mean loss over this rank's rows, a [1] f32 tensor (on the device; synchronise to read it).
  virtual Tensor forward(RunContext& ctx, const Batch& batch) = 0;
  // Gradients of the last forward's loss, added into every Parameter::grad (the input embeddings' through
  // the sink, when one is set and takes them).
  virtual void backward(RunContext& ctx) = 0;
  // The learned token and position tables whose gradient a sink may take: GPT-2 has both, Llama a token table
  // alone; both null for a model without them (toy, mlp).
  struct InputEmbeddingTables {
    Parameter* token = nullptr;
    Parameter* position = nullptr;
  };
  virtual InputEmbeddingTables input_embedding_tables() { return {}; }
  // Hands the input embeddings' gradient to `sink` from the next backward on (nullptr: no sink). False for a
  // model without a token table, which keeps no sink.
  virtual bool set_input_embedding_gradient_sink(InputEmbeddingGradientSink* /*sink*/) { return false; }

 protected:
  Model() : Module("") {}
};

}  // namespace fsdplab
