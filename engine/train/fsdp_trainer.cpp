#include "engine/train/fsdp_trainer.hpp"

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>

#include <unistd.h>

#include "engine/comm/local_comm.hpp"
#include "engine/fsdp/memory_model.hpp"
#include "engine/fsdp/fsdp_events.hpp"
#include "engine/fsdp/fully_sharded_model.hpp"
#include "engine/fsdp/observed_communicator.hpp"
#include "engine/nn/checkpoint.hpp"
#include "engine/runtime/error.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/train/batch_source.hpp"
#include "engine/train/expected_memory.hpp"
#include "engine/train/model_factory.hpp"
#include "engine/train/run_device.hpp"
#include "engine/train/training_checkpoint.hpp"
#include "engine/train/rank_launch.hpp"

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

// The sim device keeps its memory in this host's RAM, so W ranks must fit in it together: refused
// before any rank starts, from the analytic per-rank peak (memory_model.hpp; activations counted for
// gpt2 and llama, the models whose activations dwarf the rest), instead of W threads running out of memory
// midway.
void check_host_memory(const RunConfig& run, const FsdpOptions& options, BuiltModel& probe, int ranks_here) {
  double per_rank = 0;
  for (std::int64_t bytes : fsdp_memory(fsdp_memory_input(run, options, probe))) per_rank += static_cast<double>(bytes);
  const double host = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  check(host <= 0 || per_rank * ranks_here <= host, "--world ", run.world, ": the ranks need about ",
        per_rank * ranks_here / 1e9, " GB of this host's memory (", ranks_here, " in this process, ", per_rank / 1e9,
        " GB each; the sim device keeps its memory in host RAM) and this host has ", host / 1e9,
        " GB; use fewer ranks, a smaller model or batch, or --dry-run (shapes, time and memory only)");
}

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
  // ---- before any rank starts: everything that can be wrong with the request --------------------
  check(world >= 1, "--world ", world, "; expected >= 1");
  // A/B runs: the two schedules the steps take turns in; SYNC never prefetches, so the options may name
  // the ASYNC blocks' prefetch whichever mode comes first.
  check(fsdp.ab_block >= 0, "train_fsdp: A/B block of ", fsdp.ab_block,
        " steps; expected 0 (off) or the steps of each SYNC and ASYNC block (>= 1)");
  const FsdpOptions sync_options = sync_schedule(fsdp.options);
  FsdpOptions async_options = fsdp.options;
  async_options.mode = OverlapMode::async;
  if (fsdp.ab_block > 0) {
    validate_fsdp_options(sync_options, world);
    validate_fsdp_options(async_options, world);
  } else {
    validate_fsdp_options(fsdp.options, world);
  }
  const FsdpOptions& first_schedule =
      fsdp.ab_block == 0 ? fsdp.options : fsdp.options.mode == OverlapMode::sync ? sync_options : async_options;
  check(run.steps >= 0, "--steps ", run.steps, "; expected >= 0");
  check(run.accumulate >= 1, "--accumulate ", run.accumulate, "; expected the micro-batches per step, >= 1");
  if (run.accumulate > 1 && run.batch % world == 0) {
    check(run.batch % (static_cast<std::int64_t>(world) * run.accumulate) == 0, "--accumulate ", run.accumulate,
          " with --batch ", run.batch, " on ", world, " ranks: each rank's ", run.batch / world,
          " rows must split evenly into that many micro-batches (expected a divisor of ", run.batch / world, ")");
  }
  check(run.accumulate == 1 || fsdp.options.buffers == UnshardBuffers::alloc, "--accumulate ", run.accumulate,
        " with --buffers pool: accumulation keeps every unit's full gradient between micro-batches, and the pool has "
        "two gradient buffers; use --buffers alloc");
  check(!fsdp.dry_run || (run.save_init.empty() && run.save_final.empty() && run.load_init.empty()),
        "a dry run has no parameter values to save or load; drop --save-init, --save-final and --load-init");
  check(fsdp.sinks.empty() || fsdp.sinks.size() == static_cast<std::size_t>(world), "train_fsdp: ",
        fsdp.sinks.size(), " trace sinks for ", world, " ranks; expected one per rank or none");
  check(fsdp.observers.empty() || fsdp.observers.size() == static_cast<std::size_t>(world), "train_fsdp: ",
        fsdp.observers.size(), " FSDP observers for ", world, " ranks; expected one per rank or none");
  const DeviceSpec device_spec = run_device_spec(run, presets, fsdp.dry_run);
  const RankLayout layout = rank_layout(run.comm, world, device_spec.kind, run.gpu);
  BuiltModel probe = build_model(run);  // checks the model and the batch split
  fsdp.tasks.check_complete();
  fsdp.tasks.integration->plan_units(*probe.model, probe.unit_kinds);
  if (device_spec.kind == DeviceKind::sim && !fsdp.dry_run) check_host_memory(run, first_schedule, probe, static_cast<int>(layout.ranks_here.size()));
  std::optional<CheckpointFile> init_file;
  if (!run.load_init.empty()) init_file.emplace(CheckpointFile::open(run.load_init, *probe.model, probe.identity));
  // Training checkpoints: the folder to write checked now, the one to resume from checked whole.
  const bool checkpointing = !run.checkpoint_dir.empty();
  const bool resuming = !run.resume_dir.empty();
  check(run.checkpoint_every >= 0, "--checkpoint-every ", run.checkpoint_every, "; expected >= 1 (0: after the last step only)");
  check(run.checkpoint_every == 0 || checkpointing, "--checkpoint-every needs --checkpoint DIR");
  check(!fsdp.dry_run || (!checkpointing && !resuming), "a dry run has no training state to checkpoint or resume");
  check(!resuming || (run.load_init.empty() && run.save_init.empty()), "--resume continues a run from its checkpoint; "
        "--load-init and --save-init start one: drop them");
  nlohmann::json checkpoint_identity;
  std::optional<TrainingCheckpoint> resume_from;
  if (checkpointing || resuming) checkpoint_identity = checkpoint_run(run, fsdp.options, fsdp.tasks, probe);
  if (resuming) {
    resume_from.emplace(TrainingCheckpoint::open(run.resume_dir, checkpoint_identity));
    check(resume_from->step() < run.steps, "--resume '", run.resume_dir, "' holds ", resume_from->step(),
          " completed steps and --steps is ", run.steps, ": nothing left to run; pass --steps above ",
          resume_from->step());
  }
  if (checkpointing) check_checkpoint_target(run.checkpoint_dir);
  const int first_step = resuming ? resume_from->step() : 0;
  // A save that failed leaves its staging folder: removed when this returns, after every rank has stopped.
  struct StagingCleanup {
    std::string dir;
    ~StagingCleanup() {
      if (!dir.empty()) discard_checkpoint_staging(dir);
    }
  } const staging_cleanup{run.checkpoint_dir};
  LocalWorldOptions world_options;
  world_options.timeout = fsdp.comm_timeout;
  // Ranks wait for rank 0 while it writes the whole model of a checkpoint.
  if (checkpointing) world_options.timeout = checkpoint_wait_timeout(*probe.model, run.optimizer_spec(), world_options.timeout);
  // Processes cannot see each other's progress, only their own wait: a peer that is merely slower (another
  // machine, a busier core) must not be taken for a dead one.
  if (layout.processes) world_options.timeout = std::max(world_options.timeout, std::chrono::milliseconds(30'000));
  if (fsdp.control) world_options.hold = [control = fsdp.control] { return control->holding(); };
  const bool observed = !fsdp.observers.empty() || fsdp.control;

  std::vector<StepReport> reports;
  run_ranks(layout, [&](RankSeat& seat) {
    const int r = seat.rank();
    DeviceSpec rank_spec = device_spec;
    rank_spec.gpu = seat.gpu();
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
    FsdpRank rank{device, world_comm, shard_comm, replica_comm, first_schedule};
    RankEventRelay relay(fsdp.observers.empty() ? nullptr : fsdp.observers[static_cast<std::size_t>(r)], fsdp.control,
                         fsdp.control_source);
    if (observed) {
      rank.observer = &relay;
      for (ObservedCommunicator* c : {&world_comm, &shard_comm, &replica_comm}) c->report_to(rank);
    }
    const ActivityScope glue(rank, CodeSite{7, "train_fsdp (engine/train/fsdp_trainer.cpp)"});

    BuiltModel built = build_model(run);
    FullyShardedModel sharded(*built.model, rank, fsdp.tasks, built.unit_kinds);
    if (init_file) {
      sharded.load_parameters(*init_file);
    } else if (!resume_from) {  // a resume reads the parameters with the optimizer state, below
      sharded.init_parameters(run.seed);
    }
    const auto save = [&](const std::string& dir) {
      sharded.with_full_parameters([&] {
        if (r == 0) save_checkpoint(dir, *built.model, built.config);
      });
      comm.barrier();  // nobody reads the folder before rank 0 has renamed its files into place
    };
    if (!run.save_init.empty()) save(run.save_init);

    std::unique_ptr<Optimizer> optimizer = sharded.make_optimizer(run.optimizer_spec());
    if (resume_from) restore_rank_state(*resume_from, sharded, *optimizer);
    const auto checkpoint = [&](int completed) {
      save_training_checkpoint(run.checkpoint_dir, checkpoint_identity, built.config, completed, sharded, *optimizer,
                               [&] {
                                 if (fsdp.on_checkpoint_written) fsdp.on_checkpoint_written(r, completed);
                               });
    };
    BatchSource data(built.batch, run.seed, run.data_file);
    RunContext ctx{device, fsdp.options.param_dtype};
    const Stream compute = device.stream(Lane::compute);
    const Tensor mean_loss = Tensor::empty(device, {1}, DType::f32, MemTag::workspace, "loss (mean over ranks)");
    for (int step = first_step; step < run.steps; ++step) {
      device.synchronize();  // the host writes the batch into memory the last step's ops may have read
      if (fsdp.ab_block > 0) {
        const bool sync = ab_mode(fsdp.options.mode, fsdp.ab_block, step) == OverlapMode::sync;
        sharded.set_overlap_schedule(sync ? sync_options : async_options);
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
        sharded.optimizer_step(*optimizer);
        if (micro_batches > 1) scale(compute, mean_loss, ctx.loss_scale, mean_loss);
        {
          const ActivityScope activity(rank, CodeSite{7, "train_fsdp: the loss all-reduce (engine/train/fsdp_trainer.cpp)"});
          rank.world.all_reduce(compute, mean_loss, ReduceOp::avg);
        }
        device.synchronize();
        report.loss = device.dry_run() ? std::numeric_limits<double>::quiet_NaN() : mean_loss.to_vector()[0];
      }
      report.end = device.host_time();
      if (r == 0) {
        reports.push_back(report);
        if (on_step) on_step(report);
      }
      const int completed = step + 1;
      if (checkpointing && (completed == run.steps || (run.checkpoint_every > 0 && completed % run.checkpoint_every == 0)))
        checkpoint(completed);
    }
    if (checkpointing && first_step == run.steps) checkpoint(run.steps);  // no step ran (--steps 0)
    if (!run.save_final.empty()) save(run.save_final);
    if (fsdp.on_rank_done) fsdp.on_rank_done(r, device);
  }, world_options);
  return reports;
}

}  // namespace fsdplab
