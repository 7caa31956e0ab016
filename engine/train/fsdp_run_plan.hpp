// fsdp_run_plan.hpp — an FSDP training run checked whole before any rank starts, and what follows from
// the request: the schedules, the device and where the ranks run, the model's shapes, the files to read.
//
// Every check that needs no rank is made here, once, in the order a user would fix them: the numbers
// and the output paths (check_run_request, trainer.hpp), the FSDP
// options against W (sharding.hpp), the steps, micro-batches and dry-run limits, the device and the
// ranks' placement (run_device.hpp, rank_launch.hpp), the model and its batch split (model_factory.hpp),
// the units the run's task 7 makes of it, the host memory the sim device needs (memory_model.hpp), a
// --load-init folder, the checkpoint to write and the one to resume (training_checkpoint.hpp). The
// first thing wrong is an Error naming what was expected and what came; a plan that is built can train.
// train_fsdp (fsdp_trainer.hpp) builds one, then starts the ranks.
#pragma once
#include <optional>

#include "engine/comm/local_comm.hpp"
#include "engine/runtime/device_factory.hpp"
#include "engine/train/checkpoint_lock.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/model_factory.hpp"
#include "engine/train/rank_launch.hpp"
#include "engine/train/training_checkpoint.hpp"

namespace fsdplab {

struct FsdpRunPlan {
  // Checks `fsdp` against `presets`; an Error for the first thing wrong.
  explicit FsdpRunPlan(const FsdpRun& fsdp, const PresetCatalog& presets);

  // The schedules the steps run under: `sync` and `async` take turns in an A/B run (FsdpRun::ab_block);
  // `first` is the first step's (fsdp.options itself when the run does not alternate).
  FsdpOptions sync, async, first;
  DeviceSpec device;
  RankLayout layout;
  BuiltModel probe;  // a build of the run's model, shapes only: what the checks and checkpoints read
  std::optional<CheckpointFile> init_file;         // --load-init
  bool checkpointing = false;                      // --checkpoint DIR
  std::optional<CheckpointLock> checkpoint_lock;   // held by the process that commits checkpoints (rank 0's)
  nlohmann::json checkpoint_identity;  // what a checkpoint records; set when checkpointing, resuming or under MPI
  std::optional<TrainingCheckpoint> resume_from;   // --resume
  int first_step = 0;                              // the resumed checkpoint's completed steps, else 0
  LocalWorldOptions world_options;                 // the collectives' timeout and hold
};

// The sim device keeps its memory in this host's RAM. The host memory one rank of `run` needs there: the analytic
// bound of its per-rank peak under its schedule (fsdp_memory_bound, memory_model.hpp: ASYNC holds more than SYNC's
// formula; A/B runs pass the ASYNC options, the larger; activations counted for gpt2 and llama, the models whose
// activations dwarf the rest).
double sim_host_bytes_per_rank(const RunConfig& run, const FsdpOptions& options, BuiltModel& probe);

// A run's ranks in this process, as check_sim_host_memory counts them.
struct SimRanksHere {
  std::string label;  // "--world 2" for a run alone; "SYNC", "ASYNC" for the dashboard's runs
  int ranks = 0;
  double bytes_per_rank = 0;  // sim_host_bytes_per_rank
};

// Refuses sim ranks that together need more host memory than this process may use (with `layout`'s processes, than
// the processes of the run on this host may use together: check_ranks_fit_host_memory), naming both and the
// `remedy`: refused before any rank starts, instead of ranks running out of memory midway. FsdpRunPlan checks a
// run's own ranks; the dashboard, its runs side by side.
void check_sim_host_memory(const RankLayout& layout, const std::vector<SimRanksHere>& runs, const std::string& remedy);

}  // namespace fsdplab
