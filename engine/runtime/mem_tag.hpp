// mem_tag.hpp — what an allocation is for. Every byte the engine allocates carries one tag, so the
// memory ledger can answer "where did the memory go" in the writeup's own categories.
#pragma once
#include <array>
#include <string_view>

namespace fsdplab {

enum class MemTag {
  param_shard,  // this rank's chunk of a FlatParameter (fp32 master); the baseline's parameters (one rank: all)
  param_full,   // an all-gathered (unsharded) FlatParameter, live between gather and reshard; the mixed-precision
                // baseline's bf16 copies of its parameters, live through a step
  grad_shard,   // this rank's chunk of the reduced gradient; the baseline's (f32) gradients
  grad_full,    // the unsharded gradient of a unit, before reduce-scatter; the mixed-precision baseline's bf16
                // gradients, before they are widened to f32
  optim_state,  // optimizer state (momentum, Adam m and v) for the local shard
  activation,   // forward activations saved for backward, and their gradients
  comm_buffer,  // staging buffers of collectives
  workspace,    // scratch space of ops
};

constexpr std::size_t kMemTagCount = 8;
constexpr std::array<MemTag, kMemTagCount> kAllMemTags = {
    MemTag::param_shard, MemTag::param_full,  MemTag::grad_shard,  MemTag::grad_full,
    MemTag::optim_state, MemTag::activation,  MemTag::comm_buffer, MemTag::workspace};

constexpr std::string_view mem_tag_name(MemTag t) {
  constexpr std::array<std::string_view, kMemTagCount> names = {
      "param_shard", "param_full", "grad_shard",  "grad_full",
      "optim_state", "activation", "comm_buffer", "workspace"};
  return names[static_cast<std::size_t>(t)];
}

// Parses one of the names above; anything else is an Error listing them.
MemTag parse_mem_tag(std::string_view name);

}  // namespace fsdplab
