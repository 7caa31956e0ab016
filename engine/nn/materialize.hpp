// materialize.hpp — giving a meta model real storage on one device, whole (the single-rank baseline).
//
// FSDP's task 1 materialises only each rank's shard instead; both draw from the same counter-based
// initialisation, so the baseline and every FSDP rank start from equal values.
#pragma once
#include <cstdint>

#include "engine/nn/model.hpp"

namespace fsdplab {

// Allocates every parameter's value (f32, tag param_shard: with one rank the shard is the whole),
// contents undefined, and every gradient (f32, grad_shard) zeroed: for values about to be loaded.
void allocate_full(Module& model, Device& device);

// allocate_full, then fills every value from its ParamInit under `seed` (init_values).
void materialize_full(Module& model, Device& device, std::uint64_t seed);

// Fills every parameter's value, allocated already wherever it points (its own tensor, or a view of a flat
// buffer), from its ParamInit under `seed`.
void init_values(Module& model, std::uint64_t seed);

// Zeroes every parameter's gradient on `stream` (at the start of each step).
void zero_grads(Module& model, Stream stream);

}  // namespace fsdplab
