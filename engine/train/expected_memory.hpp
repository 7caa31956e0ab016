// expected_memory.hpp — what the analytic memory model (fsdp/memory_model.hpp) is told about a run:
// its units, options, world, optimizer and the model's activations on one rank's rows. One place, so
// the host-memory check before a run, the dry-run report and the dashboard's memory panel compare the
// ledger with the same formula.
#pragma once
#include "engine/fsdp/memory_model.hpp"
#include "engine/train/model_factory.hpp"

namespace fsdplab {

// The memory model's input for `run` sharded by `options`, from the shapes in `built` (build_model(run)).
// Activations are counted for the models the memory model covers (gpt2, llama) and left at 0 for the
// others. An Error where plan_unit_sizes refuses the units (nested units below the root).
FsdpMemoryInput fsdp_memory_input(const RunConfig& run, const FsdpOptions& options, BuiltModel& built);

}  // namespace fsdplab
