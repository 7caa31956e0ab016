// dry_run_report.hpp — what `fsdplab run --dry-run` prints after its steps: rank 0's memory, the peak
// of each ledger tag (param_shard, param_full, grad_shard, grad_full, optim_state, activation,
// comm_buffer, workspace) beside the analytic model of engine/fsdp/memory_model.hpp where it applies,
// under CPU offload the host ledger's peaks beside them (where the shards went), whether the run without --dry-run
// would fit in this host's memory on the sim device (ranks as threads), the steps' simulated times, the
// collectives rank 0 issued in each step, and for Llama 70B on 128 ranks the lecture's figures next to ours with a line
// for each place we differ and why.
#pragma once
#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/fsdp/fsdp_observer.hpp"
#include "engine/runtime/memory_ledger.hpp"
#include "engine/train/fsdp_trainer.hpp"

namespace fsdplab::app {

// The lecture's slide "FSDP for Llama 70B on 128 GPUs" (the FSDP lecture), the lines of it that fsdplab measures,
// as the slide writes them: what one GPU holds, and the size the slide gives it. The dry run's report and
// `fsdplab report` set this run's figures beside them.
namespace lecture_slide {
struct Line {
  std::string_view what;
  std::string_view size;
};
inline constexpr std::string_view kTitle = "FSDP for Llama 70B on 128 GPUs";
inline constexpr Line kFlatParams{"80 FlatParams: 70B x 4 bytes / 128", "2.1 GB"};
inline constexpr Line kExpAvg{"80 Adam's avg of grads: 70B x 4 bytes / 128", "2.1 GB"};
inline constexpr Line kExpAvgSq{"80 Adam's avg of grads^2: 70B x 4 bytes / 128", "2.1 GB"};
inline constexpr Line kWeightBuffer{"1 buffer for bf16 weights: 0.9B x 2 bytes", "1.8 GB"};
inline constexpr Line kGradientBuffer{"1 buffer for bf16 gradients: 0.9B x 2 bytes", "1.8 GB"};
}  // namespace lecture_slide

// This run's figures beside the lecture's slide "FSDP for Llama 70B on 128 GPUs" (the FSDP lecture): sizes in GB
// (10^9 bytes) from rank 0's ledger peaks, counts of parameters (elements).
struct LectureFigures {
  double params = 0;         // the model's parameters
  double layer = 0;          // one decoder layer's (model.layers.0)
  double root = 0;           // the root unit's FlatParameter (embed_tokens, norm, lm_head), padded
  int flat_parameters = 0;
  double shard = 0;          // param_shard peak
  double optim = 0;          // optim_state peak (exp_avg + exp_avg_sq)
  double layer_buffer = 0;   // one layer's gathered buffer in the param dtype
  double root_buffer = 0;    // the root's
  double param_full = 0, grad_full = 0, grad_shard = 0, comm_buffer = 0, activation = 0;  // peaks
  double layers_gathered = 0;  // (param_full - root_buffer) / layer_buffer
  double layers_grads = 0;     // (grad_full - root_buffer) / layer_buffer
};

class DryRunReport {
 public:
  DryRunReport() : start_(std::chrono::steady_clock::now()) {}

  // Sets `fsdp` up to report to this object, before train_fsdp runs it: rank 0's ledger as it stands after
  // its last step (on_rank_done), and the collectives rank 0 issues (its FSDP observer; the other ranks get
  // none and make no events). Only rank 0's thread writes, and the report reads after train_fsdp has joined
  // the ranks.
  void watch(FsdpRun& fsdp);

  // Prints the report of the dry run `fsdp`, which train_fsdp ran with `presets`, returning rank 0's
  // `steps`. The wall time is counted from this object's construction.
  void print(const FsdpRun& fsdp, const PresetCatalog& presets, const std::vector<StepReport>& steps) const;

  // Whether print() sets the lecture's slide beside the run: Llama 70B on 128 ranks.
  static bool lecture_applies(const RunConfig& run);
  // The figures print() sets beside the slide, for the dry run `fsdp` (lecture_applies) captured here.
  LectureFigures lecture_figures(const FsdpRun& fsdp) const;

 private:
  std::chrono::steady_clock::time_point start_;
  bool captured_ = false;
  TagBytes peaks_{};
  TagBytes host_peaks_{};  // rank 0's host ledger: where CPU offload keeps the shards and the optimizer state
  std::int64_t peak_total_ = 0;
  // Rank 0's collectives issued, by step (0-based) and kind ("all_gather"...).
  class CollectiveCount : public FsdpObserver {
   public:
    void on_fsdp_event(const FsdpEvent& event) override;
    std::map<int, std::map<std::string, int>> by_step;
  };
  CollectiveCount collectives_;
};

}  // namespace fsdplab::app
