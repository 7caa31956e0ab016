#include "engine/train/expected_memory.hpp"

namespace fsdplab {

FsdpMemoryInput fsdp_memory_input(const RunConfig& run, const FsdpOptions& options, BuiltModel& built) {
  FsdpMemoryInput input;
  input.units = plan_unit_sizes(*built.model, built.unit_kinds, options, run.world);
  input.options = options;
  input.world = run.world;
  input.optimizer_states = optimizer_state_count(run.optimizer_spec());
  if (built.batch.kind == BatchShape::Kind::tokens)
    input.model = model_memory(*built.model, run.batch / run.world, built.batch.seq, options.param_dtype);
  return input;
}

}  // namespace fsdplab
