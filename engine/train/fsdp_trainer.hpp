// fsdp_trainer.hpp — the FSDP training loop: W ranks (threads or processes, rank_launch.hpp), each with
// its own device (sim or cuda, run_device.hpp), training one model sharded by the reference tasks (or
// others), step for step like the baseline.
//
// Each rank takes rows [r*B/W, (r+1)*B/W) of every step's global batch, so the mean of the ranks'
// losses is the baseline's loss, and gradients averaged over the ranks are the baseline's gradients.
// The step reported is rank 0's: its host times, and the loss averaged over the ranks (an all-reduce,
// as a logging `dist.all_reduce(loss)` would).
#pragma once
#include <functional>
#include <vector>

#include "engine/fsdp/fsdp_observer.hpp"
#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/fsdp/sharding.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/trace/trace_event.hpp"
#include "engine/train/run_config.hpp"
#include "engine/train/run_control.hpp"
#include "engine/train/trainer.hpp"

namespace fsdplab {

struct FsdpRun {
  RunConfig run;         // run.world ranks
  FsdpOptions options;
  FsdpTasks tasks = reference_tasks();
  // One sink per rank (rank r's trace events and memory counters), or none.
  std::vector<TraceSink*> sinks;
  // Called on each rank's thread after its last step, with its device (for the ledger and the op
  // log) while the run's tensors are still alive.
  std::function<void(int rank, Device& device)> on_rank_done;
  // Called on each rank's thread at the end of each step (its work done, the device synchronised), with the step
  // (counted from 0) and its device: what the step left allocated is the ledger's live bytes.
  std::function<void(int rank, int step, Device& device)> on_step_done;
  bool keep_op_log = false;  // record every op (the op graph schedule tests read); long runs keep none
  // Shapes, time and memory only, no numerics (sim_device.hpp): plans models far larger than this host
  // could compute. Losses are reported as NaN; what needs values (saving, loading, checkpoints) is refused
  // (fsdp_run_plan.cpp).
  bool dry_run = false;
  // Checkpoints (run.checkpoint_dir): called on each rank's thread after it wrote its own file of the
  // checkpoint after `step` completed steps, before the checkpoint is committed. Tests throw here to
  // check that a failing rank leaves the previous checkpoint intact.
  std::function<void(int rank, int step)> on_checkpoint_written;
  // One FSDP observer per rank (rank r's events, on its thread: fsdp_observer.hpp), or none; a rank whose
  // observer is null makes no events unless `control` is set.
  std::vector<FsdpObserver*> observers;
  // Step-through, pause, stop and pacing (run_control.hpp): each rank calls control->gate(control_source,
  // event) at every FSDP event, after its observer got the event, and while the control holds a rank its
  // peers' collectives do not time out. A stopped run makes train_fsdp throw RunStopped.
  RunControl* control = nullptr;
  int control_source = 0;
  // A/B: 0 off; k > 0: the run alternates every k steps between SYNC (sync_schedule(options)) and ASYNC
  // (options with mode async), starting with options.mode: step s runs ab_mode(options.mode, k, s).
  // SYNC never prefetches, so options.prefetch is the ASYNC blocks' whichever mode comes first.
  int ab_block = 0;
  // Where a --save-init or --save-final that fails despite the checks before the run goes (trainer.hpp),
  // on rank 0's thread; without one, the failure ends the run.
  OutputFailed on_output_failed;
};

// The overlap mode of `step` in a run that alternates every `ab_block` steps, starting with `first`;
// `first` at every step when ab_block is 0. Steps count from the run's start, resumed runs included.
OverlapMode ab_mode(OverlapMode first, int ab_block, int step);

// Checks the whole request before any rank starts (FsdpRunPlan, fsdp_run_plan.hpp: the options against W,
// the batch split, the units of the model, a --load-init folder, the checkpoints), then trains, calling
// on_step on rank 0's thread after each step. Writes --save-init and --save-final folders of the whole
// (gathered) parameters, as the baseline writes them. A step whose loss (the ranks' mean) is not finite
// ends the run on every rank (fail_nonfinite_loss) unless run.allow_nonfinite. With run.checkpoint_dir, writes a
// training checkpoint (training_checkpoint.hpp) every run.checkpoint_every steps and after the last; with
// run.resume_dir, continues from that checkpoint up to run.steps in all (the reports are the steps run
// here). Returns rank 0's step reports.
std::vector<StepReport> train_fsdp(const FsdpRun& fsdp, const PresetCatalog& presets,
                                   const std::function<void(const StepReport&)>& on_step);

}  // namespace fsdplab
