#include "engine/train/trainer.hpp"

#include <unistd.h>

#include "engine/fsdp/memory_model.hpp"
#include "engine/nn/checkpoint.hpp"
#include "engine/nn/materialize.hpp"
#include "engine/optim/optimizer.hpp"
#include "engine/runtime/error.hpp"
#include "engine/train/model_factory.hpp"
#include "engine/train/run_device.hpp"

namespace fsdplab {

std::vector<StepReport> train_baseline(const RunConfig& run, const PresetCatalog& presets,
                                       const std::function<void(const StepReport&)>& on_step, TraceSink* sink) {
  check(run.world == 1, "--world ", run.world, ": sharded training over several ranks arrives with FSDP; the "
        "baseline trains one rank (--world 1)");
  check(run.steps >= 0, "--steps ", run.steps, "; expected >= 0");
  check(run.checkpoint_dir.empty() && run.resume_dir.empty(), "training checkpoints (--checkpoint, --resume) are "
        "written and read by FSDP runs (train_fsdp; --world 1 is one); the baseline saves --save-final");
  const DeviceSpec device_spec = run_device_spec(run, presets, /*dry_run=*/false);
  // Declared before the model: tensors must go before the device that holds their memory.
  const std::unique_ptr<Device> owned_device = make_device(0, device_spec);
  Device& device = *owned_device;
  if (sink) device.add_sink(sink);
  device.set_keep_op_log(false);  // a long run would keep every op; the trace sink sees them anyway
  BuiltModel built = build_model(run);
  if (device_spec.kind == DeviceKind::sim) {
    // The sim device keeps its memory in this host's RAM: a model that cannot fit is refused before anything
    // is allocated (as train_fsdp refuses a world), from the analytic peak of memory_model.hpp.
    const ModelMemory activations = built.batch.kind == BatchShape::Kind::tokens
                                        ? model_memory(*built.model, run.batch, built.batch.seq, DType::f32)
                                        : ModelMemory{};
    double need = 0;
    for (std::int64_t bytes : baseline_memory(*built.model, optimizer_state_count(run.optimizer_spec()), activations))
      need += static_cast<double>(bytes);
    const double host = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
    check(host <= 0 || need <= host, "--model ", run.model, run.preset.empty() ? "" : " --preset ", run.preset,
          ": the single-rank baseline needs about ", need / 1e9, " GB of this host's memory (the sim device keeps its "
          "memory in host RAM) and this host has ", host / 1e9, " GB; use a smaller model or batch, or plan it with "
          "--dry-run (an FSDP dry run: shapes, time and memory only)");
  }
  BatchSource data(built.batch, run.seed, run.data_file);
  Model& model = *built.model;
  // Loaded values replace initial ones: drawing them first would be wasted (seconds for gpt2 small).
  if (run.load_init.empty()) {
    materialize_full(model, device, run.seed);
  } else {
    allocate_full(model, device);
    load_checkpoint(run.load_init, model, built.identity);
  }
  if (!run.save_init.empty()) save_checkpoint(run.save_init, model, built.config);

  std::vector<OptimTarget> targets;
  for (Parameter* p : model.parameters()) targets.push_back({p->name, p->value, p->grad});
  std::unique_ptr<Optimizer> optimizer = make_optimizer(run.optimizer_spec(), std::move(targets));

  RunContext ctx{device, DType::f32};
  const Stream compute = device.stream(Lane::compute);
  std::vector<StepReport> reports;
  for (int step = 0; step < run.steps; ++step) {
    device.synchronize();  // the host writes the batch into memory the last step's ops may have read
    StepReport report{step, 0, device.host_time(), 0};
    {
      LabelScope scope(device, {step, -1, "forward"});
      const Batch batch = data.batch(device, step, 0, 1);
      zero_grads(model, compute);
      const Tensor loss = model.forward(ctx, batch);
      device.set_labels({step, -1, "backward"});
      model.backward(ctx);
      device.set_labels({step, -1, "optimizer"});
      optimizer->step(compute);
      device.synchronize();
      report.loss = loss.to_vector()[0];
    }
    report.end = device.host_time();
    reports.push_back(report);
    if (on_step) on_step(report);
  }
  if (!run.save_final.empty()) save_checkpoint(run.save_final, model, built.config);
  return reports;
}

}  // namespace fsdplab
