// dry_run_report.hpp — what `fsdplab run --dry-run` prints after its steps: rank 0's memory, the peak
// of each ledger tag (param_shard, param_full, grad_shard, grad_full, optim_state, activation,
// comm_buffer, workspace) beside the analytic model of engine/fsdp/memory_model.hpp where it applies,
// the steps' simulated times, and for Llama 70B on 128 ranks the lecture's figures next to ours with
// a line for each place we differ and why.
#pragma once
#include <chrono>
#include <functional>
#include <vector>

#include "engine/runtime/memory_ledger.hpp"
#include "engine/train/fsdp_trainer.hpp"

namespace fsdplab::app {

class DryRunReport {
 public:
  DryRunReport() : start_(std::chrono::steady_clock::now()) {}

  // For FsdpRun::on_rank_done: keeps rank 0's ledger as it stands after its last step. Only rank 0's
  // thread writes, and the report reads after train_fsdp has joined the ranks.
  std::function<void(int rank, Device& device)> capture();

  // Prints the report of the dry run `fsdp`, which train_fsdp ran with `presets`, returning rank 0's
  // `steps`. The wall time is counted from this object's construction.
  void print(const FsdpRun& fsdp, const PresetCatalog& presets, const std::vector<StepReport>& steps) const;

 private:
  std::chrono::steady_clock::time_point start_;
  bool captured_ = false;
  TagBytes peaks_{};
  std::int64_t peak_total_ = 0;
};

}  // namespace fsdplab::app
