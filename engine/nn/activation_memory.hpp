// activation_memory.hpp — what a model holds on one rank beyond its parameters, gradients and optimizer state:
// the activation peak of a training step, counted from the tensors its forward and backward allocate (the ops
// allocate none, and neither model allocates workspace), so a run can be checked against its memory ledger. The FSDP
// memory model (engine/fsdp/memory_model.hpp) and the single-rank baseline's add these to their parameters' bytes.
#pragma once
#include <cstdint>

#include "engine/runtime/dtype.hpp"

namespace fsdplab {

struct Gpt2Config;
struct LlamaConfig;
class Module;

struct ModelMemory {
  std::int64_t activation = 0;
};

// GPT-2's activations on `batch` rows of `seq` tokens computed in `dtype`, counted from the
// tensors gpt2_model.cpp and layers.cpp allocate; see activation_memory.cpp.
ModelMemory gpt2_memory(const Gpt2Config& config, std::int64_t batch, std::int64_t seq, DType dtype);
// Llama's activations on `batch` rows of `seq` tokens computed in `dtype`, counted from
// the tensors llama_model.cpp and layers.cpp allocate; see activation_memory.cpp.
ModelMemory llama_memory(const LlamaConfig& config, std::int64_t batch, std::int64_t seq, DType dtype);
// The same for a model built by build_model (gpt2, llama); an Error for models whose activations are not
// counted.
ModelMemory model_memory(const Module& model, std::int64_t batch, std::int64_t seq, DType dtype);

}  // namespace fsdplab
