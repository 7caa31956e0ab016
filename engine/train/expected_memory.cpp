#include "engine/train/expected_memory.hpp"

namespace fsdplab {

FsdpMemoryInput fsdp_memory_input(const RunConfig& run, const FsdpOptions& options, BuiltModel& built) {
  FsdpMemoryInput input;
  input.units = plan_unit_sizes(*built.model, built.unit_kinds, options, run.world);
  input.options = options;
  input.world = run.world;
  input.optimizer_states = optimizer_state_count(run.optimizer_spec());
  input.micro_batches = run.accumulate;
  const std::int64_t rows = run.batch / run.world / run.accumulate;  // a rank's micro-batch
  if (built.batch.kind == BatchShape::Kind::tokens) {
    input.model = model_memory(*built.model, rows, built.batch.seq, options.param_dtype);
    input.micro_batch_inputs = 8 * rows * built.batch.seq;  // i32 ids and targets
  }
  const Model::InputEmbeddingTables tables = built.model->input_embedding_tables();
  if (options.embedding_grad == EmbeddingGradient::rows && tables.token) {
    const std::int64_t tokens = rows * built.batch.seq;
    input.embedding_rows = embedding_rows_staging(run.world, tokens, tables.token->shape.back(),
                                                  tables.position ? tables.position->numel() : 0, options.param_dtype);
  }
  return input;
}

}  // namespace fsdplab
