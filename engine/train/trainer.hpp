// trainer.hpp — the single-rank baseline training loop, the reference every FSDP run is judged by.
//
// Each step: the host waits for the device, writes the batch, zeroes the gradients, runs forward,
// backward and the optimizer on the compute stream, then waits again to read the loss (as
// `loss.item()` does). Ops are labelled with the step and phase for the trace.
// It computes in f32, or with RunConfig::baseline_precision bf16 in mixed precision: each step casts the
// f32 master weights to bf16 copies, the model computes with those, and the bf16 gradients are widened
// for the optimizer's f32 step (baseline_parameters.hpp), as torch.autocast trains.
#pragma once
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/runtime/presets.hpp"
#include "engine/trace/trace_event.hpp"
#include "engine/train/run_config.hpp"

namespace fsdplab {

struct BuiltModel;  // model_factory.hpp

struct StepReport {
  int step = 0;
  double loss = 0;
  SimTime begin = 0;  // device time (virtual on sim) when the step started
  SimTime end = 0;
  // The whole model's gradient 2-norm before clipping, where the run clips (--clip-grad-norm); else NaN.
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
};

// Called when a folder the run saves itself (--save-init, --save-final) cannot be written although the
// checks before the run passed (a full disk, a folder removed meanwhile), with the Error's message: the
// run goes on, and what it returns is still written by the caller. Without one, the failure ends the run.
using OutputFailed = std::function<void(const std::string& message)>;

// Runs `save`, which writes a folder of the run's own (--save-init, --save-final): its Error goes to
// `on_failed` when given, and ends the run when not.
void save_output(const OutputFailed& on_failed, const std::function<void()>& save);

// Before the run (train_baseline, and FsdpRunPlan before any rank starts), in this order:
// the numbers no other check reads (--lr, --momentum: finite and >= 0; --batch, --seq, the mlp's shape);
// no output (--losses, --trace, --trace-dir, --save-init, --save-final, --checkpoint) is the same file as
// another path of the run or lies in a folder of another, nor holds an input (--data, --load-init, --resume,
// --presets) in its folder (check_paths_apart): --resume alone may be --checkpoint's folder; and every output
// but --checkpoint (checked as one by FsdpRunPlan) can be written where it is named (output_file.hpp; nothing
// is created). An Error naming the option, what came and what was expected.
void check_run_request(const RunConfig& run);

// bf16 (mixed precision) only for the token models: toy and mlp read f32 regression inputs, which bf16 layers
// cannot. Called by train_baseline and FsdpRunPlan alike, with the dtype the run computes in.
void check_compute_dtype(const RunConfig& run, const BuiltModel& built, DType compute_dtype);

// The Error for a step whose loss is NaN or infinite (run.allow_nonfinite not set): it names the step
// (counted from 1, as the progress line shows it) and the loss, and suspects first, where `tasks_replaced` (an FSDP
// run with a task other than the reference's), that task.
[[noreturn]] void fail_nonfinite_loss(const RunConfig& run, int step, double loss, bool tasks_replaced = false);

// Trains `run` (world 1) on the device run.device names (run_device.hpp). Calls on_step after each step, and
// sends every trace event and memory counter to `sink` (may be null). Writes --save-init and
// --save-final folders when asked (a failure goes to on_output_failed, when given). A step with a
// non-finite loss ends the run (fail_nonfinite_loss) after its on_step. Returns the steps' reports.
std::vector<StepReport> train_baseline(const RunConfig& run, const PresetCatalog& presets,
                                       const std::function<void(const StepReport&)>& on_step, TraceSink* sink,
                                       const OutputFailed& on_output_failed = {});

}  // namespace fsdplab
