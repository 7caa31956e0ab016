// materialize.hpp — a model's initial values, whole, written into parameters already allocated on one device
// (by the single-rank baseline: engine/train/baseline_parameters.hpp).
//
// FSDP's task 1 materialises only each rank's shard instead; both draw from the same counter-based
// initialisation, so the baseline and every FSDP rank start from equal values.
#pragma once
#include <cstdint>

#include "engine/nn/model.hpp"

namespace fsdplab {

// Fills every parameter's value, allocated already wherever it points (its own tensor, or a view of a flat
// buffer), from its ParamInit under `seed`.
void init_values(Module& model, std::uint64_t seed);

}  // namespace fsdplab
