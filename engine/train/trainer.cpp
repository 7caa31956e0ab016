#include "engine/train/trainer.hpp"

#include <array>
#include <cmath>

#include "engine/fsdp/memory_model.hpp"
#include "engine/nn/checkpoint.hpp"
#include "engine/nn/materialize.hpp"
#include "engine/optim/optimizer.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/host_memory_limit.hpp"
#include "engine/runtime/output_file.hpp"
#include "engine/tensor/reduce.hpp"
#include "engine/trace/chrome_trace.hpp"
#include "engine/train/baseline_parameters.hpp"
#include "engine/train/model_factory.hpp"
#include "engine/train/run_device.hpp"

namespace fsdplab {

void check_compute_dtype(const RunConfig& run, const BuiltModel& built, DType compute_dtype) {
  check(compute_dtype == DType::f32 || built.batch.kind == BatchShape::Kind::tokens, "--precision ",
        dtype_name(compute_dtype), " with --model ", run.model, ": mixed precision is for the token models (gpt2, "
        "llama); toy and mlp take f32 regression inputs their bf16 layers cannot read, so they train in f32 (drop "
        "--precision)");
}

void check_run_request(const RunConfig& run) {
  check(std::isfinite(run.lr) && run.lr >= 0, "--lr ", run.lr, "; expected a finite learning rate >= 0");
  check(std::isfinite(run.momentum) && run.momentum >= 0, "--momentum ", run.momentum,
        "; expected a finite momentum >= 0");
  check(run.momentum == 0 || run.optimizer == "sgd", "--momentum ", run.momentum, " with --optimizer ", run.optimizer,
        ": momentum is SGD's (add --optimizer sgd); adamw's moments are its betas");
  check(std::isfinite(run.clip_grad_norm) && run.clip_grad_norm >= 0, "--clip-grad-norm ", run.clip_grad_norm,
        "; expected a finite 2-norm > 0 (or 0: no clipping)");
  check(run.batch >= 1, "--batch ", run.batch, "; expected >= 1 rows per step");
  check(run.seq >= 0, "--seq ", run.seq, "; expected >= 1 tokens (0: the model's context length)");
  check(run.mlp_width >= 1 && run.mlp_depth >= 1, "--mlp-width ", run.mlp_width, " --mlp-depth ", run.mlp_depth,
        "; expected >= 1 each");
  struct Output {
    const std::string& path;
    const char* option;
    bool folder;
  };
  const Output outputs[] = {{run.losses_file, "--losses", false},
                            {run.trace_file, "--trace", false},
                            {run.trace_dir, "--trace-dir", true},
                            {run.save_init, "--save-init", true},
                            {run.save_final, "--save-final", true}};
  // A checkpoint folder (--checkpoint, --resume) is the run's whole: a save replaces it, so nothing else may
  // lie in it. --checkpoint's own rules are checked where the run is planned (check_checkpoint_target).
  std::vector<PathUse> uses = {{"--checkpoint", run.checkpoint_dir, true, true},
                               {"--data", run.data_file, false, false},
                               {"--presets", run.presets_file, false, false},
                               {"--losses", run.losses_file, true, false},
                               {"--trace", run.trace_file, true, false}};
  // --resume may name --checkpoint's own folder: the checkpoint is read whole before the first save replaces it.
  if (run.resume_dir.empty() || run.checkpoint_dir.empty() || !same_file(run.resume_dir, run.checkpoint_dir))
    uses.push_back({"--resume", run.resume_dir, false, true});
  // The other folders are checked by the files the run reads or writes there (a model's two, a trace per
  // rank): another path may lie in them under a name of its own (--trace-dir . beside --data tok.bin).
  const std::array<std::filesystem::path, 2> model_files = {kCheckpointWeightsFile, kCheckpointConfigFile};
  const auto model_folder = [&](const char* option, const std::string& folder, bool written) {
    if (!folder.empty())
      for (const std::filesystem::path& name : model_files) uses.push_back({option, folder / name, written, false});
  };
  model_folder("--load-init", run.load_init, false);
  model_folder("--save-init", run.save_init, true);
  model_folder("--save-final", run.save_final, true);
  if (!run.trace_dir.empty())
    for (int r = 0; r < run.world; ++r) uses.push_back({"--trace-dir", rank_trace_file(run.trace_dir, r), true});
  // First: an output in another's folder is the problem to name, not that the folder does not exist yet.
  check_paths_apart(uses);
  for (const Output& output : outputs) {
    if (output.path.empty()) continue;
    if (output.folder) {
      check_output_folder(output.path, output.option);
    } else {
      check_output_file(output.path, output.option);
    }
  }
}

void fail_nonfinite_loss(const RunConfig& run, int step, double loss, bool tasks_replaced) {
  // "nan" whatever its sign bit, as the progress line prints it.
  const std::string shown = std::isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf";
  fail("step ", step + 1, " of ", run.steps, ": the loss is ", shown, "; the training diverged (",
       tasks_replaced ? "an FSDP task of --impl that does not keep its contract, " : "", "a learning rate of ", run.lr,
       " too high for this model, or non-finite initial values), so the run stops here and saves nothing more; "
       "expected a finite loss (--allow-nonfinite trains on regardless)");
}

void save_output(const OutputFailed& on_failed, const std::function<void()>& save) {
  try {
    save();
  } catch (const Error& e) {
    if (!on_failed) throw;
    on_failed(e.what());  // the run and its other outputs go on
  }
}

std::vector<StepReport> train_baseline(const RunConfig& run, const PresetCatalog& presets,
                                       const std::function<void(const StepReport&)>& on_step, TraceSink* sink,
                                       const OutputFailed& on_output_failed) {
  check(run.world == 1, "--world ", run.world, ": the baseline trains one rank (--world 1); several ranks train "
        "with FSDP (train_fsdp)");
  check(run.steps >= 0, "--steps ", run.steps, "; expected >= 0");
  check(run.checkpoint_dir.empty() && run.resume_dir.empty(), "training checkpoints (--checkpoint, --resume) are "
        "written and read by FSDP runs (train_fsdp; --world 1 is one); the baseline saves --save-final");
  check_run_request(run);
  // The model computes in this dtype; bf16 is mixed precision, its optimizer steps on f32 master weights.
  const DType compute_dtype = run.baseline_precision;
  check(compute_dtype == DType::f32 || compute_dtype == DType::bf16, "--precision ", dtype_name(compute_dtype),
        ": the baseline computes in f32, or in bf16 on f32 master weights (mixed precision)");
  const DeviceSpec device_spec = run_device_spec(run, presets, /*dry_run=*/false);
  // Declared before the model: tensors must go before the device that holds their memory.
  const std::unique_ptr<Device> owned_device = make_device(0, device_spec);
  Device& device = *owned_device;
  if (sink) device.add_sink(sink);
  device.set_keep_op_log(false);  // a long run would keep every op; the trace sink sees them anyway
  BuiltModel built = build_model(run);
  check_compute_dtype(run, built, compute_dtype);
  if (device_spec.kind == DeviceKind::sim) {
    // The sim device keeps its memory in this host's RAM: a model that cannot fit is refused before anything
    // is allocated (as train_fsdp refuses a world), from the analytic peak of memory_model.hpp.
    const ModelMemory activations = built.batch.kind == BatchShape::Kind::tokens
                                        ? model_memory(*built.model, run.batch, built.batch.seq, compute_dtype)
                                        : ModelMemory{};
    double need = 0;
    for (std::int64_t bytes :
         baseline_memory(*built.model, optimizer_state_count(run.optimizer_spec()), activations, compute_dtype))
      need += static_cast<double>(bytes);
    check_fits_host_memory(need,
                           "the single-rank baseline's parameters, gradients, optimizer state and activations "
                           "(--model " +
                               run.model + (run.preset.empty() ? "" : " --preset " + run.preset) + ")",
                           "use a smaller model or batch, or plan it with --dry-run (an FSDP dry run: shapes, time "
                           "and memory only)");
  }
  BatchSource data(built.batch, run.seed, run.data_file);
  data.check_every_token();  // its digest is a training checkpoint's, which the baseline writes none of
  Model& model = *built.model;
  BaselineParameters params(model, device, compute_dtype);  // flat, with bf16 copies in mixed precision
  // Loaded values replace initial ones: drawing them first would be wasted (seconds for gpt2 small).
  if (run.load_init.empty()) {
    init_values(model, run.seed);
  } else {
    load_checkpoint(run.load_init, model, built.identity, built.settings);
  }
  if (!run.save_init.empty())
    save_output(on_output_failed, [&] { save_checkpoint(run.save_init, model, built.config); });

  // One target, one op for the whole model.
  std::unique_ptr<Optimizer> optimizer =
      make_optimizer(run.optimizer_spec(), {{"flat_param_f32", params.values(), params.grads()}});

  RunContext ctx{device, compute_dtype};
  const Stream compute = device.stream(Lane::compute);
  std::vector<StepReport> reports;
  for (int step = 0; step < run.steps; ++step) {
    device.synchronize();  // the host writes the batch into memory the last step's ops may have read
    StepReport report{step, 0, device.host_time(), 0};
    {
      LabelScope scope(device, {step, -1, "forward"});
      const Batch batch = data.batch(device, step, 0, 1);
      params.begin_step(compute);  // zeroed gradients; in bf16, the parameters are copies until end_backward
      const Tensor loss = model.forward(ctx, batch);
      device.set_labels({step, -1, "backward"});
      model.backward(ctx);
      params.end_backward(compute);  // in bf16, widens the gradients into the f32 ones the optimizer reads
      device.set_labels({step, -1, "optimizer"});
      Tensor squared_norm;  // clip_grad_norm_: the whole gradient is one tensor here
      if (run.clip_grad_norm > 0) {
        squared_norm = Tensor::empty(device, {1}, DType::f32, MemTag::workspace, "gradient squared norm");
        sum_of_squares(compute, params.grads(), squared_norm);
        clip_grad_with_norm(compute, params.grads(), squared_norm, run.clip_grad_norm);
      }
      optimizer->step(compute);
      device.synchronize();
      report.loss = loss.to_vector()[0];
      if (squared_norm.defined()) report.grad_norm = std::sqrt(squared_norm.to_vector()[0]);
    }
    report.end = device.host_time();
    reports.push_back(report);
    if (on_step) on_step(report);
    if (!std::isfinite(report.loss) && !run.allow_nonfinite) fail_nonfinite_loss(run, step, report.loss);
  }
  if (!run.save_final.empty())
    save_output(on_output_failed, [&] { save_checkpoint(run.save_final, model, built.config); });
  return reports;
}

}  // namespace fsdplab
