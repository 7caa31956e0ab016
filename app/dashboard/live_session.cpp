#include "app/dashboard/live_session.hpp"

#include <algorithm>

#include "engine/fsdp/sharding.hpp"
#include "engine/runtime/error.hpp"
#include "engine/train/expected_memory.hpp"
#include "engine/train/fsdp_run_plan.hpp"
#include "engine/train/model_factory.hpp"
#include "engine/train/run_device.hpp"
#include "engine/train/trainer.hpp"
#include "labs/student_tasks.hpp"

namespace fsdplab::app {

std::string_view comparison_name(Comparison c) {
  switch (c) {
    case Comparison::side_by_side: return "SYNC and ASYNC side by side";
    case Comparison::sync_only: return "SYNC only";
    case Comparison::async_only: return "ASYNC only";
    case Comparison::ab: return "A/B: one run alternating SYNC and ASYNC blocks";
    case Comparison::impl: return "reference beside --impl, ASYNC";
  }
  return "";
}

std::string_view comparison_flag(Comparison c) {
  switch (c) {
    case Comparison::side_by_side: return "side-by-side";
    case Comparison::sync_only: return "sync";
    case Comparison::async_only: return "async";
    case Comparison::ab: return "ab";
    case Comparison::impl: return "impl";
  }
  return "";
}

Comparison parse_comparison(std::string_view flag) {
  std::string expected;
  for (Comparison c : kComparisons) {
    if (comparison_flag(c) == flag) return c;
    expected += (expected.empty() ? "" : ", ") + std::string(comparison_flag(c));
  }
  fail("--compare '", flag, "'; expected one of ", expected);
}

// ---- settings → runs -------------------------------------------------------------------------------

std::vector<SessionSettings::PlannedRun> SessionSettings::plan() const {
  check(world >= 1, "world size ", world, "; expected at least 1 rank");
  check(steps >= 1, "steps ", steps, "; expected at least 1");
  check(steps_per_second >= 0, "steps per second ", steps_per_second, "; expected >= 0 (0: unpaced)");
  RunConfig run;
  run.model = model;
  run.preset = model_has_named_sizes(model) ? preset : "";
  run.attention = model_has_named_sizes(model) ? attention : "auto";
  run.world = world;
  run.steps = steps;
  check(device == "sim" || device == "cuda", "--device '", device, "'; expected sim or cuda");
  run.device = device;
  run.device_preset = device_preset;
  run.link_preset = link_preset;
  run.nodes = nodes;
  check_whole_nodes(run.nodes, world);
  check_link_used(run.link_preset, world);
  run.emulate_link = emulate_link;
  run.cupti = cupti;
  set_sm_split(run, sm_split);
  run.wrap = wrap;
  run.batch = batch > 0 ? batch : (std::max(8, world) + world - 1) / world * world;  // 8 sequences, or one per rank
  run.seq = seq;
  run.optimizer = optimizer;
  run.lr = lr;
  run.clip_grad_norm = clip_grad_norm;
  BuiltModel probe = build_model(run);  // an unknown model or preset is refused here, before any run starts
  // A cuda session on a machine without a usable GPU, or a dry run on cuda, is refused with the reason.
  check_cuda_options_unused(run, run_device_spec(run, PresetCatalog::builtin(), dry_run).kind);

  const FsdpChoice choice = parse_fsdp_flags(fsdp);
  FsdpOptions options = choice.options;
  if (options.strategy == ShardingStrategy::hybrid_shard && options.hybrid_group == 0)
    options.hybrid_group = std::max(1, world / 2);
  options.mode = OverlapMode::async;
  const FsdpOptions sync = sync_schedule(options);
  validate_fsdp_options(options, world);
  validate_fsdp_options(sync, world);
  check_compute_dtype(run, probe, options.param_dtype);
  check(comparison != Comparison::ab || ab_block >= 1, "A/B block of ", ab_block, " steps; expected >= 1");
  check(comparison != Comparison::impl || choice.impl.any_replaced(), "--compare impl runs the reference beside the "
        "tasks --impl selects, and --impl is '", fsdp.impl, "'; give the student's tasks, e.g. --impl 3=student");

  const auto planned = [&](std::string label, const FsdpOptions& o, bool is_sync, const ImplChoice& impl) {
    PlannedRun p;
    p.label = std::move(label);
    p.run.run = run;
    p.run.options = o;
    p.run.tasks = tasks_for(impl);
    p.run.dry_run = dry_run;
    p.sync = is_sync;
    p.impl = impl;
    return p;
  };
  // Every comparison but impl runs the --impl tasks in each of its runs.
  const ImplChoice& impl = choice.impl;
  std::vector<PlannedRun> runs;
  switch (comparison) {
    case Comparison::side_by_side:
      runs.push_back(planned("SYNC", sync, true, impl));
      runs.push_back(planned("ASYNC", options, false, impl));
      break;
    case Comparison::sync_only: runs.push_back(planned("SYNC", sync, true, impl)); break;
    case Comparison::async_only: runs.push_back(planned("ASYNC", options, false, impl)); break;
    case Comparison::ab:
      runs.push_back(planned("A/B", options, false, impl));
      runs.back().run.ab_block = ab_block;
      break;
    case Comparison::impl:
      runs.push_back(planned("reference", options, false, ImplChoice{}));
      runs.push_back(planned(impl_label(impl), options, false, impl));
      break;
  }
  // --break stops the focus run (the last: see LiveSession::start) in a task whose code reports events there.
  if (break_at && break_at->task != 0) {
    const FsdpRun& focus = runs.back().run;
    check(task_reports_events(break_at->task, focus.options, focus.run.world), "--break task:", break_at->task, ": ",
          why_task_reports_no_events(break_at->task, focus.options, focus.run.world),
          ", so there is no event of it to stop at; break on one of tasks 3 to 8 (task 6 under ASYNC where a unit is "
          "gathered ahead, task 8 with replica groups), or see the task with --compare impl (yours beside the "
          "reference)");
  }
  std::vector<SimRanksHere> side_by_side;
  for (PlannedRun& p : runs) {
    try {
      p.expected = fsdp_memory(fsdp_memory_input(p.run.run, p.run.options, probe));
      side_by_side.push_back({p.label, world, sim_host_bytes_per_rank(p.run.run, p.run.options, probe)});
    } catch (const Error&) {
      // units the memory model does not describe: no expectation
    }
  }
  // Each run's plan checks that its own ranks fit in this host's memory; side by side, they share it (where the
  // memory model describes them all: else each run's own plan is the check).
  if (device == "sim" && !dry_run && runs.size() > 1 && side_by_side.size() == runs.size()) {
    check_sim_host_memory(rank_layout("local", world, DeviceKind::sim, 0), side_by_side,
                          "compare fewer runs (--compare sync or async), use fewer ranks or a smaller "
                          "model, or --dry-run (shapes, time and memory only)");
  }
  // Side by side on one GPU, each run's ranks get SMs of their own (RunConfig::runs_on_gpu).
  for (std::size_t i = 0; i < runs.size(); ++i) {
    runs[i].run.run.runs_on_gpu = static_cast<int>(runs.size());
    runs[i].run.run.run_index_on_gpu = static_cast<int>(i);
  }
  return runs;
}

// ---- the session -----------------------------------------------------------------------------------

LiveSession::LiveSession(SessionSettings settings) : settings_(std::move(settings)) { start(settings_.plan()); }

LiveSession::~LiveSession() { stop(); }

void LiveSession::restart(SessionSettings settings) {
  const std::vector<SessionSettings::PlannedRun> planned = settings.plan();  // refused before anything stops
  stop();
  settings_ = std::move(settings);
  start(planned);
}

void LiveSession::stop() {
  if (control_) control_->stop();
  runs_.clear();  // joins every rank
  store_.clear();
  log_.clear();
  expected_.clear();
  impls_.clear();
  maps_.clear();
}

void LiveSession::start(const std::vector<SessionSettings::PlannedRun>& planned) {
  control_ = std::make_unique<RunControl>();
  control_->set_steps_per_second(settings_.steps_per_second);
  // Step-through follows rank 0 of the last run: ASYNC, where prefetch makes the order interesting.
  control_->set_focus(static_cast<int>(planned.size()) - 1, 0);
  if (const std::optional<BreakAt>& b = settings_.break_at) {
    control_->set_break_from_step(b->from_step);
    if (b->others_hold) control_->set_hold_others_from_step(b->from_step);
    if (b->kind) control_->set_break_on(*b->kind, true);
    if (b->task != 0) control_->set_break_on_task(b->task, true);
    control_->set_breaking(true);
  }
  const DeviceSpec device = run_device_spec(planned.front().run.run, presets_, planned.front().run.dry_run);
  const bool on_gpu = device.kind == DeviceKind::cuda;
  where_ = on_gpu ? "cuda: GPU " + std::to_string(device.gpu) + ", ranks sharing it" +
                        " (" + std::string(sm_split_description(settings_.sm_split)) + ")" +
                        (device.emulate_link ? ", emulated link " + device.link.name : std::string()) +
                        (device.cupti ? ", CUPTI kernels" : ", CUDA-event op spans") + ", wall clock"
                  : std::string("sim device, virtual time");
  for (const SessionSettings::PlannedRun& p : planned) {
    const int source = store_.add_source(p.label, p.run.run.world, p.sync);
    store_.set_wall_clock(source, on_gpu);
    if (!on_gpu) store_.set_device(source, device.preset.name, static_cast<std::int64_t>(device.preset.memory_bytes));
    store_.set_last_step(source, p.run.run.steps - 1);
    log_.add_source();
    expected_.push_back(p.expected);
    impls_.push_back(p.impl);
    maps_.push_back(plan_flat_parameter_map(p.run.run, p.run.options, p.impl));
    runs_.push_back(std::make_unique<LiveRun>(p.run, presets_, source, *control_));
  }
}

ImplChoice LiveSession::impl_of(int source) const {
  return source >= 0 && source < static_cast<int>(impls_.size()) ? impls_[static_cast<std::size_t>(source)]
                                                                   : ImplChoice{};
}

const FlatParameterMap& LiveSession::map(int source) const {
  check(source >= 0 && source < static_cast<int>(maps_.size()), "FlatParameter map of source ", source,
        "; expected 0..", static_cast<int>(maps_.size()) - 1);
  return maps_[static_cast<std::size_t>(source)];
}

std::size_t LiveSession::drain() {
  std::size_t moved = 0;
  for (const auto& run : runs_) {
    moved += run->drain_into(store_, log_);
    // Once, when it first shows: the panels that read the store mark the run failed, the timeline its race.
    if (store_.source(run->source()).failure.empty()) {
      if (std::optional<std::string> error = run->error()) {
        store_.set_failure(run->source(), std::move(*error));
        if (std::optional<RaceReport> race = run->race()) store_.set_race(run->source(), std::move(*race));
      }
    }
  }
  return moved;
}

bool LiveSession::finished() const {
  return std::all_of(runs_.begin(), runs_.end(), [](const auto& r) { return r->finished(); });
}

std::vector<std::string> LiveSession::errors() const {
  std::vector<std::string> errors;
  for (const auto& run : runs_)
    if (const auto e = run->error()) errors.push_back(store_.source(run->source()).label + ": " + *e);
  return errors;
}

}  // namespace fsdplab::app
