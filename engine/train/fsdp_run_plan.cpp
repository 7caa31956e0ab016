#include "engine/train/fsdp_run_plan.hpp"

#include <sstream>

#include "engine/comm/mpi_comm.hpp"
#include "engine/fsdp/fully_sharded_model.hpp"
#include "engine/fsdp/memory_model.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/host_memory_limit.hpp"
#include "engine/train/expected_memory.hpp"
#include "engine/train/run_device.hpp"

namespace fsdplab {
namespace {

// Under mpirun every process parses a command line of its own. One started with another --seed, --lr or
// --batch would train state that parts ways with its peers' while every collective still matches, so rank 0's
// run (checkpoint_run: model, data, optimizer, FSDP layout) is compared with each process's before any step.
void check_same_run_as_rank0(const nlohmann::json& mine, int rank) {
  const nlohmann::json rank0 = nlohmann::json::parse(mpi_broadcast_string(mine.dump(), 0));
  const std::string diffs = run_differences(rank0, mine, "rank 0", "rank " + std::to_string(rank));
  check(diffs.empty(), "rank ", rank, " was started for another run than rank 0: ", diffs,
        "; give every process of the MPI launcher the same options");
}

}  // namespace

double sim_host_bytes_per_rank(const RunConfig& run, const FsdpOptions& options, BuiltModel& probe) {
  return static_cast<double>(tag_total(fsdp_memory_bound(fsdp_memory_input(run, options, probe))));
}

void check_sim_host_memory(const RankLayout& layout, const std::vector<SimRanksHere>& runs, const std::string& remedy) {
  double together = 0;
  std::ostringstream who;
  if (runs.size() > 1) who << "the runs side by side, ";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const SimRanksHere& r = runs[i];
    together += r.bytes_per_rank * r.ranks;
    who << (i == 0                ? ""
            : i + 1 < runs.size() ? ", "
                                  : " and ")
        << r.label << " ("
        << (layout.processes ? std::string("one in each process")
            : r.ranks == 1   ? "1 rank in this process"
                             : std::to_string(r.ranks) + " ranks in this process")
        << ", " << r.bytes_per_rank / 1e9 << " GB each)";
  }
  if (runs.size() > 1) who << ",";
  check_ranks_fit_host_memory(layout, together, who.str(), remedy);
}

FsdpRunPlan::FsdpRunPlan(const FsdpRun& fsdp, const PresetCatalog& presets) {
  const RunConfig& run = fsdp.run;
  const int world = run.world;
  check(world >= 1, "--world ", world, "; expected >= 1");
  check_run_request(run);  // the numbers, and every output path
  check(run.baseline_precision == DType::f32, "RunConfig::baseline_precision ", dtype_name(run.baseline_precision),
        " is the single-rank baseline's compute dtype; FSDP computes in FsdpOptions::param_dtype (--precision): set "
        "that instead and leave this f32");
  // A/B runs: the two schedules the steps take turns in; SYNC never prefetches, so the options may name
  // the ASYNC blocks' prefetch whichever mode comes first.
  check(fsdp.ab_block >= 0, "train_fsdp: A/B block of ", fsdp.ab_block,
        " steps; expected 0 (off) or the steps of each SYNC and ASYNC block (>= 1)");
  sync = sync_schedule(fsdp.options);
  async = fsdp.options;
  async.mode = OverlapMode::async;
  if (fsdp.ab_block > 0) {
    validate_fsdp_options(sync, world);
    validate_fsdp_options(async, world);
  } else {
    validate_fsdp_options(fsdp.options, world);
  }
  first = fsdp.ab_block == 0 ? fsdp.options : fsdp.options.mode == OverlapMode::sync ? sync : async;
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
  device = run_device_spec(run, presets, fsdp.dry_run);
  check_whole_nodes(run.nodes, world);
  layout = rank_layout(run.comm, world, device.kind, run.gpu);
  probe = build_model(run);  // checks the model and the batch split
  check_compute_dtype(run, probe, fsdp.options.param_dtype);
  fsdp.tasks.check_complete();
  const std::vector<UnitPlan> plans = fsdp.tasks.integration->plan_units(*probe.model, probe.unit_kinds);
  if (fsdp.options.embedding_grad == EmbeddingGradient::rows) check_embedding_rows_fit(*probe.model, plans);
  if (fsdp.options.buffers == UnshardBuffers::pool)
    check_pool_units_take_turns(plans, *fsdp.tasks.forward, fsdp.options.strategy);
  // Every process of an MPI launch takes part, whatever it needs: the processes on one host check together.
  const bool in_host_memory = device.kind == DeviceKind::sim && !fsdp.dry_run;
  check_sim_host_memory(
      layout,
      {{layout.processes ? "the " + std::to_string(world) + " ranks"
                         : "--world " + std::to_string(world) + ": the ranks",
        static_cast<int>(layout.ranks_here.size()),
        in_host_memory ? sim_host_bytes_per_rank(run, fsdp.ab_block > 0 ? async : first, probe) : 0.0}},
      "use fewer ranks, a smaller model or batch, or --dry-run (shapes, time and memory only)");
  if (!run.load_init.empty())
    init_file.emplace(CheckpointFile::open(run.load_init, *probe.model, probe.identity, probe.settings));
  // Training checkpoints: the folder to write checked now, the one to resume from checked whole.
  checkpointing = !run.checkpoint_dir.empty();
  const bool resuming = !run.resume_dir.empty();
  check(run.checkpoint_every >= 0, "--checkpoint-every ", run.checkpoint_every,
        "; expected >= 1 (0: after the last step only)");
  check(run.checkpoint_every == 0 || checkpointing, "--checkpoint-every needs --checkpoint DIR");
  check(!fsdp.dry_run || (!checkpointing && !resuming), "a dry run has no training state to checkpoint or resume");
  check(!run.reshard || resuming, "--reshard moves a checkpoint's state into this run's layout; it needs --resume DIR");
  check(!resuming || (run.load_init.empty() && run.save_init.empty()), "--resume continues a run from its checkpoint; "
        "--load-init and --save-init start one: drop them");
  // Once, for every rank, after the checks that read no data: the --data file read through (a dry run's too, which
  // reads no batch but may record the run's identity), its tokens checked and its digest taken in one pass.
  const std::optional<FileDigest> data = BatchSource(probe.batch, run.seed, run.data_file).check_every_token();
  // The run's identity: what a checkpoint records and resumes, and what every process of an MPI launch must share.
  const bool processes = layout.processes && layout.world > 1;
  if (checkpointing || resuming || processes)
    checkpoint_identity = checkpoint_run(run, fsdp.options, fsdp.tasks, probe, data);
  if (processes) check_same_run_as_rank0(checkpoint_identity, layout.ranks_here.front());
  if (resuming) {
    resume_from.emplace(TrainingCheckpoint::open(run.resume_dir, checkpoint_identity, run.reshard));
    check(resume_from->step() < run.steps, "--resume '", run.resume_dir, "' holds ", resume_from->step(),
          " completed steps and --steps is ", run.steps, ": nothing left to run; pass --steps above ",
          resume_from->step());
  }
  if (checkpointing) {
    check_checkpoint_target(run.checkpoint_dir);
    // Before anything is written: a second run on the folder is refused here, naming the first.
    if (layout.reports()) checkpoint_lock.emplace(run.checkpoint_dir);
  }
  first_step = resuming ? resume_from->step() : 0;
  world_options.timeout = fsdp.run.comm_timeout;
  // Ranks wait for rank 0 while it writes the whole model of a checkpoint.
  if (checkpointing)
    world_options.timeout = checkpoint_wait_timeout(*probe.model, run.optimizer_spec(), world_options.timeout);
  if (fsdp.control) world_options.hold = [control = fsdp.control] { return control->holding(); };
}

}  // namespace fsdplab
