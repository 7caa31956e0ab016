#include "engine/train/fsdp_trainer.hpp"

#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "engine/fsdp/fsdp_events.hpp"
#include "engine/fsdp/fully_sharded_model.hpp"
#include "engine/fsdp/observed_communicator.hpp"
#include "engine/nn/checkpoint.hpp"
#include "engine/runtime/error.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/train/batch_source.hpp"
#include "engine/train/fsdp_run_plan.hpp"
#include "engine/train/model_factory.hpp"
#include "engine/train/rank_launch.hpp"
#include "engine/train/training_checkpoint.hpp"

namespace fsdplab {
namespace {

// The groups one rank belongs to: the shard group (S ranks) and the replica group (W / S ranks holding
// the same shard), as task 8 colours them for hybrid sharding; either may be the world itself.
struct RankGroups {
  std::unique_ptr<Communicator> shard_owned, replica_owned;
  Communicator* shard = nullptr;
  Communicator* replica = nullptr;

  RankGroups(Communicator& world, int shard_size, const HybridShardTask& hybrid) {
    const int rank = world.rank();
    // Only hybrid sharding (1 < S < W) has groups to colour; otherwise one group is the world and the
    // other each rank alone.
    const bool hybrid_groups = shard_size > 1 && shard_size < world.world();
    if (shard_size == world.world()) {
      shard = &world;
    } else {
      shard_owned = world.split(hybrid_groups ? hybrid.shard_group_color(rank, shard_size) : rank);
      shard = shard_owned.get();
    }
    if (shard_size == 1) {
      replica = &world;
    } else {
      replica_owned = world.split(hybrid_groups ? hybrid.replica_group_color(rank, shard_size) : rank);
      replica = replica_owned.get();
    }
  }
};

// Where a rank's FSDP events go: the run's observer for that rank, then the control's gate (which may
// block the rank, or throw RunStopped).
class RankEventRelay final : public FsdpObserver {
 public:
  RankEventRelay(FsdpObserver* observer, RunControl* control, int source)
      : observer_(observer), control_(control), source_(source) {}
  void on_fsdp_event(const FsdpEvent& event) override {
    if (observer_) observer_->on_fsdp_event(event);
    if (control_) control_->gate(source_, event);
  }

 private:
  FsdpObserver* observer_;
  RunControl* control_;
  int source_;
};

}  // namespace

OverlapMode ab_mode(OverlapMode first, int ab_block, int step) {
  if (ab_block <= 0 || (step / ab_block) % 2 == 0) return first;
  return first == OverlapMode::sync ? OverlapMode::async : OverlapMode::sync;
}

std::vector<StepReport> train_fsdp(const FsdpRun& fsdp, const PresetCatalog& presets,
                                   const std::function<void(const StepReport&)>& on_step) {
  const RunConfig& run = fsdp.run;
  const int world = run.world;
  const FsdpRunPlan plan(fsdp, presets);  // every check that needs no rank
  // A save that failed leaves its staging folder: removed when this returns, after every rank has stopped.
  struct StagingCleanup {
    std::string dir;
    ~StagingCleanup() {
      if (!dir.empty()) discard_checkpoint_staging(dir);
    }
  } const staging_cleanup{run.checkpoint_dir};

  std::vector<StepReport> reports;
  run_ranks(plan.layout, [&](RankSeat& seat) {
    const int r = seat.rank();
    DeviceSpec rank_spec = plan.device;
    rank_spec.gpu = seat.gpu();
    rank_spec.sm = plan.device.sm.part(seat.index_on_gpu(), seat.ranks_on_gpu());
    // Declared first: tensors must go before the device that holds their memory.
    const std::unique_ptr<Device> owned_device = make_device(r, rank_spec);
    Device& device = *owned_device;
    if (!fsdp.sinks.empty()) device.add_sink(fsdp.sinks[static_cast<std::size_t>(r)]);
    device.set_keep_op_log(fsdp.keep_op_log);
    const std::unique_ptr<Communicator> joined = seat.connect(device);
    Communicator& comm = *joined;
    RankGroups groups(comm, shard_group_size(fsdp.options, world), *fsdp.tasks.hybrid_shard);
    // FSDP code's collectives go through these, which report them to the rank's observer when one is set.
    ObservedCommunicator world_comm(comm), shard_comm(*groups.shard), replica_comm(*groups.replica);
    FsdpRank rank{device, world_comm, shard_comm, replica_comm, plan.first};
    FsdpObserver* const observer = fsdp.observers.empty() ? nullptr : fsdp.observers[static_cast<std::size_t>(r)];
    RankEventRelay relay(observer, fsdp.control, fsdp.control_source);
    if (observer || fsdp.control) {
      rank.observer = &relay;
      for (ObservedCommunicator* c : {&world_comm, &shard_comm, &replica_comm}) c->report_to(rank);
    }
    const ActivityScope glue(rank, CodeSite{7, "train_fsdp (engine/train/fsdp_trainer.cpp)"});

    BuiltModel built = build_model(run);
    FullyShardedModel sharded(*built.model, rank, fsdp.tasks, built.unit_kinds);
    if (plan.init_file) {
      sharded.load_parameters(*plan.init_file);
    } else if (!plan.resume_from) {  // a resume reads the parameters with the optimizer state, below
      sharded.init_parameters(run.seed);
    }
    const auto save = [&](const std::string& dir) {
      sharded.with_full_parameters([&] {
        if (r != 0) return;
        save_output(fsdp.on_output_failed, [&] { save_checkpoint(dir, *built.model, built.config); });
      });
      comm.barrier();  // nobody reads the folder before rank 0 has renamed its files into place
    };
    if (!run.save_init.empty()) save(run.save_init);

    std::unique_ptr<Optimizer> optimizer = sharded.make_optimizer(run.optimizer_spec());
    if (plan.resume_from) restore_rank_state(*plan.resume_from, sharded, *optimizer);
    const auto checkpoint = [&](int completed) {
      save_training_checkpoint(run.checkpoint_dir, plan.checkpoint_identity, built.config, completed, sharded,
                               *optimizer, [&] {
                                 if (fsdp.on_checkpoint_written) fsdp.on_checkpoint_written(r, completed);
                               });
    };
    BatchSource data(built.batch, run.seed, run.data_file);
    RunContext ctx{device, fsdp.options.param_dtype};
    const Stream compute = device.stream(Lane::compute);
    const Tensor mean_loss = Tensor::empty(device, {1}, DType::f32, MemTag::workspace, "loss (mean over ranks)");
    // A step's schedule: the run's mode, or in an A/B run its block's.
    const auto mode_of = [&](int step) { return ab_mode(fsdp.options.mode, fsdp.ab_block, step); };
    for (int step = plan.first_step; step < run.steps; ++step) {
      device.synchronize();  // the host writes the batch into memory the last step's ops may have read
      if (fsdp.ab_block > 0) {
        const bool sync = mode_of(step) == OverlapMode::sync;
        sharded.set_overlap_schedule(sync ? plan.sync : plan.async);
      }
      StepReport report{step, 0, device.host_time(), 0};
      {
        LabelScope scope(device, {step, -1, "forward"});
        // Every micro-batch written now, while the device is idle (see the synchronize above).
        const int micro_batches = run.accumulate;
        std::vector<Batch> batches;
        for (int m = 0; m < micro_batches; ++m) batches.push_back(data.batch(device, step, r, world, m, micro_batches));
        ctx.loss_scale = 1.0f / static_cast<float>(micro_batches);
        fill(compute, mean_loss, 0);
        for (int m = 0; m < micro_batches; ++m) {
          rank.reduce_gradients = m + 1 == micro_batches;  // accumulate unsharded until the last
          device.set_labels({step, -1, "forward"});
          const Tensor loss = built.model->forward(ctx, batches[static_cast<std::size_t>(m)]);
          add(compute, mean_loss, loss, mean_loss);
          device.set_labels({step, -1, "backward"});
          built.model->backward(ctx);
        }
        device.set_labels({step, -1, "optimizer"});
        // The next step's first gather may start now, unless there is none or it runs SYNC (an A/B run's
        // SYNC block must gather for itself, or its step would not be SYNC's).
        const bool next_async = step + 1 < run.steps && mode_of(step + 1) == OverlapMode::async;
        const Tensor squared_norm = sharded.optimizer_step(
            *optimizer, next_async ? NextForward::follows : NextForward::none, run.clip_grad_norm);
        if (micro_batches > 1) scale(compute, mean_loss, ctx.loss_scale, mean_loss);
        {
          const ActivityScope activity(rank,
                                       CodeSite{7, "train_fsdp: the loss all-reduce (engine/train/fsdp_trainer.cpp)"});
          rank.world.all_reduce(compute, mean_loss, ReduceOp::avg);
        }
        device.synchronize();
        report.loss = device.dry_run() ? std::numeric_limits<double>::quiet_NaN() : mean_loss.to_vector()[0];
        if (squared_norm.defined() && !device.dry_run()) report.grad_norm = std::sqrt(squared_norm.to_vector()[0]);
      }
      report.end = device.host_time();
      if (fsdp.on_step_done) fsdp.on_step_done(r, step, device);
      if (r == 0) {
        reports.push_back(report);
        if (on_step) on_step(report);
      }
      // Every rank holds the same mean loss, so every rank stops at the same step.
      if (!device.dry_run() && !std::isfinite(report.loss) && !run.allow_nonfinite)
        fail_nonfinite_loss(run, step, report.loss, !(fsdp.tasks == reference_tasks()));
      const int completed = step + 1;
      if (plan.checkpointing &&
          (completed == run.steps || (run.checkpoint_every > 0 && completed % run.checkpoint_every == 0)))
        checkpoint(completed);
    }
    if (plan.checkpointing && plan.first_step == run.steps) checkpoint(run.steps);  // no step ran (--steps 0)
    if (!run.save_final.empty()) save(run.save_final);
    if (fsdp.on_rank_done) fsdp.on_rank_done(r, device);
  }, plan.world_options);
  return reports;
}

}  // namespace fsdplab
