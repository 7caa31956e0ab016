#include "grader/graded_run.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <sstream>

#include "engine/fsdp/fsdp_observer.hpp"
#include "engine/fsdp/integration_task.hpp"
#include "engine/fsdp/lab_todo.hpp"
#include "engine/fsdp/overlap_state.hpp"
#include "engine/nn/safetensors.hpp"
#include "engine/runtime/race_detector.hpp"
#include "engine/trace/trace_metrics.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/trainer.hpp"
#include "grader/diagnostic_text.hpp"

namespace fsdplab::grading {
namespace {

namespace fs = std::filesystem;

// A fresh folder under `scratch` for one training's --save-final.
fs::path fresh_folder(const fs::path& scratch, const std::string& what) {
  for (int n = 0;; ++n) {
    fs::path dir = scratch / (what + "-" + std::to_string(n));
    if (!fs::exists(dir)) return dir;
  }
}

}  // namespace

std::string GradeCase::command(const std::string& verb, const std::string& impl_flag) const {
  // `run` takes every setting of the case; the dashboard (`gui`) trains what the case trains a step (its step times
  // and memory are the case's), but has no --steps or --seed (its runs go on until stopped), and shows the graded
  // implementation beside the reference (ASYNC) or its SYNC schedule.
  const bool gui = verb == "gui";
  std::ostringstream s;
  s << "fsdplab " << verb << (dry_run ? " --dry-run" : "") << " --model " << run.model;
  if (!run.preset.empty()) s << " --preset " << run.preset;
  s << " --world " << run.world;
  if (gui) s << " --device-preset " << run.device_preset;  // the dashboard's own default is another GPU
  s << " --batch " << run.batch;
  if (run.seq > 0) s << " --seq " << run.seq;
  if (!gui) s << " --steps " << run.steps << " --seed " << run.seed;
  if (run.optimizer != "adamw") s << " --optimizer " << run.optimizer << " --lr " << run.lr;
  if (run.clip_grad_norm > 0) s << " --clip-grad-norm " << run.clip_grad_norm;
  if (run.wrap != RunConfig{}.wrap) s << " --wrap " << run.wrap;
  if (options.strategy != ShardingStrategy::full_shard) s << " --strategy " << strategy_name(options.strategy);
  if (options.strategy == ShardingStrategy::hybrid_shard) s << " --hybrid-group " << options.hybrid_group;
  if (gui) s << (options.mode == OverlapMode::sync ? " --compare sync" : " --compare impl");
  else if (options.mode != OverlapMode::async) s << " --mode " << overlap_mode_name(options.mode);
  if (options.mode == OverlapMode::async && !(options.prefetch == FsdpOptions{}.prefetch))
    s << " --prefetch " << prefetch_name(options.prefetch);
  if (options.buffers != UnshardBuffers::alloc) s << " --buffers " << unshard_buffers_name(options.buffers);
  if (options.max_inflight != FsdpOptions{}.max_inflight) s << " --max-inflight " << options.max_inflight;
  if (options.param_dtype != FsdpOptions{}.param_dtype) s << " --precision " << dtype_name(options.param_dtype);
  if (options.reduce_dtype != FsdpOptions{}.reduce_dtype) s << " --reduce-dtype " << dtype_name(options.reduce_dtype);
  if (options.offload) s << " --offload";
  if (!impl_flag.empty()) s << " " << impl_flag;
  return s.str();
}

std::string break_flag(int task, const FsdpOptions& options, int world) {
  if (task == 7) return " --break pre-forward";
  return task_reports_events(task, options, world) ? " --break task:" + std::to_string(task) : std::string();
}

std::string GradeCase::dashboard_command(int task) const {
  return command("gui", "{impl}") + break_flag(task, options, run.world);
}

GradeCase small_gpt2(int world) {
  GradeCase c;
  c.name = "gpt2 test-tiny W" + std::to_string(world);
  c.run.model = "gpt2";
  c.run.preset = "test-tiny";
  c.run.world = world;
  c.run.batch = 12;
  c.run.seq = 16;
  c.run.steps = 3;
  return c;
}

GradeCase one_rank_in_bf16() {
  GradeCase c = small_gpt2(1);
  c.name += " bf16";
  c.options.param_dtype = DType::bf16;
  return c;
}

GradedRun train_graded(const GradeCase& c, const FsdpTasks& tasks, const fs::path& scratch, RunWanted wanted) {
  GradedRun out;
  FsdpRun fsdp;
  fsdp.run = c.run;
  fsdp.options = c.options;
  fsdp.tasks = tasks;
  fsdp.keep_op_log = wanted.ops;
  fsdp.dry_run = c.dry_run;
  const bool params = wanted.params && !c.dry_run;
  const fs::path final_dir = fresh_folder(scratch, "fsdp");
  if (params) fsdp.run.save_final = final_dir.string();
  out.ops.resize(static_cast<std::size_t>(c.run.world));
  out.peaks.resize(static_cast<std::size_t>(c.run.world));
  out.live_at_step_end.resize(static_cast<std::size_t>(c.run.world));
  std::mutex mutex;
  fsdp.on_step_done = [&](int rank, int, Device& device) {
    TagBytes live{};
    for (MemTag tag : kAllMemTags) live[static_cast<std::size_t>(tag)] = device.ledger().live(tag);
    const std::lock_guard lock(mutex);
    out.live_at_step_end[static_cast<std::size_t>(rank)].push_back(live);
  };
  fsdp.on_rank_done = [&](int rank, Device& device) {
    const std::lock_guard lock(mutex);
    if (wanted.ops) out.ops[static_cast<std::size_t>(rank)] = device.ops();
    out.peaks[static_cast<std::size_t>(rank)] = device.ledger().peak_by_tag();
  };
  try {
    for (const StepReport& s : train_fsdp(fsdp, PresetCatalog::builtin(), nullptr)) out.losses.push_back(s.loss);
    if (params) out.params = read_f32_tensors(final_dir / "model.safetensors");
  } catch (const std::exception& e) {
    // A rank's own failure reaches here as the world's Error, which carries it (caused_by).
    out.error = e.what();
    if (const std::optional<RaceError> race = cause_of_type<RaceError>(e)) out.race = race->report();
    out.todo = caused_by<TaskNotImplemented>(e);
    out.unused_prefetch = caused_by<UnusedPrefetch>(e);
    out.raw_pointer = caused_by<HostTouchedDeviceMemory>(e);
    out.collective_hang = caused_by<CollectiveTimedOut>(e);
  }
  return out;
}

GradedRun train_baseline(const GradeCase& c, const fs::path& scratch) {
  GradedRun out;
  RunConfig run = c.run;
  run.world = 1;
  const fs::path final_dir = fresh_folder(scratch, "baseline");
  run.save_final = final_dir.string();
  for (const StepReport& s : train_baseline(run, PresetCatalog::builtin(), nullptr, nullptr))
    out.losses.push_back(s.loss);
  out.params = read_f32_tensors(final_dir / "model.safetensors");
  return out;
}

std::string without_failed_rank(std::string error) {
  if (error.starts_with("rank ")) {
    const std::size_t colon = error.find(" failed: ");
    if (colon != std::string::npos && error.find_first_not_of("0123456789", 5) == colon) error.erase(0, colon + 9);
  }
  return error;
}

std::string failure_text(const GradedRun& run) {
  std::string error = without_failed_rank(run.error);
  if (run.race) {
    // Every rank runs the same schedule, so which rank's detector fired first is the threads' timing too.
    const std::size_t at = error.find("stream race on rank ");
    if (at != std::string::npos) {
      const std::size_t digits = at + std::string_view("stream race on rank ").size();
      const std::size_t end = error.find_first_not_of("0123456789", digits);
      if (end != std::string::npos && end > digits) error.replace(at, end - at, "stream race on a rank");
    }
    return "the race detector stopped the run: " + error;
  }
  if (run.todo) return "a TODO is left: " + error;
  return "the run failed: " + error;
}

CheckOutcome stopped_training(std::string expected, const GradedRun& run, std::string cause,
                              const std::string& command) {
  CheckOutcome out = CheckOutcome::fail(
      std::move(expected), failure_text(run) + (command.empty() ? "" : " (" + command + ")"), std::move(cause));
  out.raced = run.race.has_value();
  return out;
}

std::string stopped_cause(const GradedRun& run, const std::function<std::string()>& diagnosis) {
  if (run.todo) return kTodoLeft;
  if (run.raw_pointer) return kRawPointerCause;
  if (run.collective_hang) return kCollectiveHangCause;
  if (run.unused_prefetch)
    return "after() named a unit that does not run later in the pass: a prefetch must be the next unit of the "
           "recorded order (next_in_forward, or next_in_backward for the backward)";
  if (diagnosis) {
    if (std::string diagnosed = diagnosis(); !diagnosed.empty()) return diagnosed;
  }
  return "the run failed: see got";
}

CheckOutcome compare_with_baseline(const GradedRun& graded, const GradedRun& baseline, double tolerance) {
  const std::string expected =
      "losses and final parameters within " + number(tolerance) + " of the single-rank baseline";
  if (!graded.trained()) return stopped_training(expected, graded, "");
  if (graded.losses.size() != baseline.losses.size())
    return CheckOutcome::fail(expected, std::to_string(graded.losses.size()) + " steps reported of " +
                                            std::to_string(baseline.losses.size()), "");
  for (std::size_t s = 0; s < graded.losses.size(); ++s) {
    const double want = baseline.losses[s], got = graded.losses[s];
    if (!agrees(got, want, tolerance))
      return CheckOutcome::fail(expected, "the loss of step " + std::to_string(s + 1) + " is " + number(got) +
                                              " against the baseline's " + number(want), "");
  }
  std::string worst_name;
  double worst = 0;
  int off = 0;
  for (const auto& [name, values] : baseline.params) {
    const auto it = graded.params.find(name);
    if (it == graded.params.end() || it->second.size() != values.size())
      return CheckOutcome::fail(expected, "the final model has no parameter '" + name + "' of " +
                                              std::to_string(values.size()) + " elements", "");
    double diff = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const double d = std::abs(static_cast<double>(it->second[i]) - values[i]);
      diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    }
    if (diff > tolerance) ++off;
    if (diff > worst) worst = diff, worst_name = name;
  }
  if (off > 0)
    return CheckOutcome::fail(expected,
                              "the losses agree but " + std::to_string(off) + " final parameter(s) do not: '" +
                                  worst_name + "' is off by " + number(worst),
                              "");
  return CheckOutcome::pass();
}

double deviation_from(const GradedRun& run, const GradedRun& baseline) {
  double worst = 0;
  for (std::size_t s = 0; s < std::min(run.losses.size(), baseline.losses.size()); ++s)
    worst = std::max(worst, std::abs(run.losses[s] - baseline.losses[s]) / std::max(1.0, std::abs(baseline.losses[s])));
  for (const auto& [name, values] : baseline.params) {
    const auto it = run.params.find(name);
    if (it == run.params.end() || it->second.size() != values.size()) continue;
    for (std::size_t i = 0; i < values.size(); ++i)
      worst = std::max(worst, static_cast<double>(std::abs(it->second[i] - values[i])));
  }
  return worst;
}

std::string divergence_text(const GradedRun& run, const GradedRun& baseline, double tolerance) {
  if (!run.trained()) return "the run stopped before its end";
  for (std::size_t s = 0; s < std::min(run.losses.size(), baseline.losses.size()); ++s) {
    if (agrees(run.losses[s], baseline.losses[s], tolerance)) continue;
    if (s == 0) return "step 1's loss already differs, before any update";
    return "step 1's loss is the baseline's and step " + std::to_string(s + 1) + "'s is not: an update differs";
  }
  if (compare_with_baseline(run, baseline, tolerance).passed()) return "the losses and the final parameters agree";
  return "the losses agree and the final parameters do not";
}

// ---- where the ranks cut the parameters ------------------------------------------------------------

CaseUnits case_units(const GradeCase& c) {
  CaseUnits units{build_model(c.run), {}, {}};
  units.plans = reference_integration().plan_units(*units.built.model, units.built.unit_kinds);
  const int shards = shard_group_size(c.options, c.run.world);
  for (const UnitPlan& plan : units.plans)
    units.layouts.push_back(reference_flat_parameter().plan(plan.params, shards, c.options.align));
  return units;
}

std::string cut_text(const FlatParamLayout& layout, const Parameter& p) {
  const std::int64_t shard = layout.shard_numel();
  for (const FlatParamEntry& e : layout.entries) {
    if (e.param != &p || e.numel == 0) continue;
    const std::int64_t first = e.offset / shard, last = (e.offset + e.numel - 1) / shard;
    if (first == last) return "";
    if (last == first + 1) return "cut between ranks " + std::to_string(first) + " and " + std::to_string(last);
    return "cut across ranks " + std::to_string(first) + " to " + std::to_string(last);
  }
  return "";
}

std::string chunk_text(const FlatParamLayout& layout, int rank) {
  const std::string chunk = "rank " + std::to_string(rank) + "'s chunk";
  const std::int64_t begin = rank * layout.shard_numel(), end = begin + layout.shard_numel();
  const std::int64_t padding = end - std::max(begin, std::min(end, layout.used_numel));
  if (padding == 0) return chunk;
  const std::string last = rank == layout.world - 1 ? "the last" : "after the parameters' end";
  if (padding == layout.shard_numel()) return chunk + " (" + last + ", all padding)";
  return chunk + " (" + last + ": " + std::to_string(padding) + " of its " + std::to_string(layout.shard_numel()) +
         " elements padding)";
}

// ---- budgets ---------------------------------------------------------------------------------------

namespace {

// Rank `ops`' communication time and the part of it compute covers, in virtual ns, as the dashboard and the benches
// measure a trace (trace_metrics.hpp, HTA's definitions): |union of communication| and |that ∩ union of compute|.
struct CommunicationTime {
  SimTime total = 0, covered = 0;
};

CommunicationTime communication_time(const std::vector<OpRecord>& ops) {
  std::vector<TimeInterval> compute, communication;
  for (const OpRecord& op : ops) {
    if (op.category == OpCategory::compute) compute.push_back({op.begin, op.end});
    if (is_communication(op.category)) communication.push_back({op.begin, op.end});
  }
  compute = merge_intervals(std::move(compute));
  communication = merge_intervals(std::move(communication));
  return {covered(communication), intersection(communication, compute)};
}

}  // namespace

RunBudget budget_of(const GradedRun& run) {
  RunBudget b;
  for (std::size_t r = 0; r < run.ops.size(); ++r) {
    int collectives = 0;
    double bytes = 0;
    for (const OpRecord& op : run.ops[r]) {
      if (!is_communication(op.category)) continue;
      ++collectives;
      bytes += static_cast<double>(op.bytes_moved);
    }
    b.collectives = std::max(b.collectives, collectives);
    if (r == 0) {
      b.bytes_moved = bytes / 1e6;
      const CommunicationTime t = communication_time(run.ops[r]);
      b.overlap_percent = t.total > 0 ? 100.0 * static_cast<double>(t.covered) / static_cast<double>(t.total) : 0.0;
      b.exposed_ns = static_cast<double>(t.total - t.covered);
    }
  }
  for (const TagBytes& peaks : run.peaks)
    for (std::size_t t = 0; t < kMemTagCount; ++t) b.peak[t] = std::max(b.peak[t], peaks[t]);
  return b;
}

std::vector<BudgetLine> budget_lines(const RunBudget& graded, const RunBudget& reference) {
  const auto peak = [&](MemTag tag) {
    return BudgetLine{"peak " + std::string(mem_tag_name(tag)),
                      static_cast<double>(graded.peak[static_cast<std::size_t>(tag)]) / 1e6,
                      static_cast<double>(reference.peak[static_cast<std::size_t>(tag)]) / 1e6, "MB"};
  };
  std::vector<BudgetLine> lines = {
      {"collectives", static_cast<double>(graded.collectives), static_cast<double>(reference.collectives), ""},
      {"bytes moved", graded.bytes_moved, reference.bytes_moved, "MB"},
      peak(MemTag::param_full),
      peak(MemTag::grad_full),
      peak(MemTag::optim_state)};
  // The shards where they differ (a unit sharded over other ranks than the reference's), which over_budget weighs too:
  // every figure a pass over budget names is on the line.
  for (const MemTag tag : {MemTag::param_shard, MemTag::grad_shard}) {
    const auto t = static_cast<std::size_t>(tag);
    if (std::abs(static_cast<double>(graded.peak[t] - reference.peak[t])) >
        1e-3 * static_cast<double>(reference.peak[t]))
      lines.push_back(peak(tag));
  }
  // Staging copies (bf16 parameters, an f32 reduction, CPU offload) where a run makes any.
  const auto staging = static_cast<std::size_t>(MemTag::comm_buffer);
  if (graded.peak[staging] > 0 || reference.peak[staging] > 0) lines.push_back(peak(MemTag::comm_buffer));
  lines.push_back({"overlap", graded.overlap_percent, reference.overlap_percent, "%"});
  return lines;
}

CheckOutcome over_budget(const RunBudget& graded, const RunBudget& reference) {
  std::string got;
  // As the budget line prints them (grade_report.cpp): counts whole, MB and % as figures_apart writes them.
  const auto said = [&](const std::string& what, double mine, double theirs, const std::string& unit) {
    char line[160];
    if (unit.empty()) {
      std::snprintf(line, sizeof line, "%s %.0f against the reference's %.0f", what.c_str(), mine, theirs);
    } else {
      const FiguresApart f = figures_apart(mine, theirs);
      std::snprintf(line, sizeof line, "%s %s %s against the reference's %s %s", what.c_str(), f.graded.c_str(),
                    unit.c_str(), f.reference.c_str(), unit.c_str());
    }
    got += (got.empty() ? "" : ", ") + std::string(line);
  };
  const auto more = [&](const std::string& what, double mine, double theirs, const std::string& unit) {
    const bool over = mine > theirs * 1.001 + 1e-9;
    if (over) said(what, mine, theirs, unit);
    return over;
  };
  // The cause names only what went over: a check titled for memory can lose its half to overlap alone.
  std::vector<std::string> causes;
  bool communication = more("collectives", graded.collectives, reference.collectives, "");
  communication = more("bytes moved", graded.bytes_moved, reference.bytes_moved, "MB") || communication;
  if (communication) causes.push_back("more communication than the task needs (a collective too many, or more bytes)");
  bool memory = false;
  for (MemTag tag : {MemTag::param_full, MemTag::grad_full, MemTag::grad_shard, MemTag::optim_state,
                     MemTag::param_shard, MemTag::comm_buffer})
    memory = more("peak " + std::string(mem_tag_name(tag)),
                  static_cast<double>(graded.peak[static_cast<std::size_t>(tag)]) / 1e6,
                  static_cast<double>(reference.peak[static_cast<std::size_t>(tag)]) / 1e6, "MB") ||
             memory;
  if (memory) causes.push_back("more memory at its peak than the task needs (a buffer held longer, or made larger)");
  // A lower share that leaves no more communication exposed is no waste: fewer collectives (a unit kept gathered
  // instead of gathered again, which the memory checks weigh) may all have been hidden ones.
  if (graded.overlap_percent < reference.overlap_percent - 1 && graded.exposed_ns > reference.exposed_ns * 1.001) {
    said("overlap", graded.overlap_percent, reference.overlap_percent, "%");
    causes.push_back(
        "less communication hidden under compute than the reference's (compare the two timelines: see it): a host "
        "sync, a stream waiting for more than it needs, a collective on the compute stream, or collectives the "
        "reference does not make");
  }
  if (got.empty()) return CheckOutcome::pass();
  std::string cause = "correct but wasteful: ";
  for (std::size_t i = 0; i < causes.size(); ++i) cause += (i == 0 ? "" : "; ") + causes[i];
  return CheckOutcome::fail(
      "a pass within the reference's budget of communication, memory and overlap on the same case",
      "passed, but " + got, cause, 0.5);
}

CheckOutcome with_budget(CheckOutcome outcome, const GradedRun& graded, const GradedRun& reference) {
  const RunBudget spent = budget_of(graded), allowance = budget_of(reference);
  if (outcome.passed()) outcome = over_budget(spent, allowance);
  outcome.budget = budget_lines(spent, allowance);
  return outcome;
}

namespace {

// What `diagnosis` names, "" where it names nothing or throws (the graded code refused the diagnosis' calls: no guess
// to add).
std::string diagnosis_or_none(const std::function<std::string()>& diagnosis) {
  if (!diagnosis) return "";
  try {
    return diagnosis();
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace

namespace {

// The single-rank baseline of case `c` as a command: its training on one rank, without FSDP (what train_baseline
// runs).
std::string baseline_command(GradeCase c) {
  c.run.world = 1;
  c.run.wrap = RunConfig{}.wrap;
  c.options = FsdpOptions{};
  c.dry_run = false;
  std::string command = c.command("run", "");
  while (command.ends_with(' ')) command.pop_back();
  return command;
}

// " (yours: fsdplab run ...; the baseline: fsdplab run ... --world 1)": both trainings a diagnostic compares, so
// that each figure it quotes can be had again.
std::string both_commands(const CheckContext& ctx, const GradeCase& c) {
  return " (yours: " + c.command("run", ctx.impl_flag()) + "; the baseline: " + baseline_command(c) + ")";
}

}  // namespace

Check equivalence_check(int task, std::string id, std::string title, int points, GradeCase c, std::string cause,
                        DifferenceCause diagnose) {
  Check check;
  check.task = task;
  check.id = std::move(id);
  check.title = std::move(title);
  check.points = points;
  // The whole training beside the reference's, no break: what differs is its losses (or the race that stops it).
  check.show = c.command("gui", "{impl}");
  check.run = [c, cause, diagnose](const CheckContext& ctx) {
    GradeCase run = c;
    if (!run.fixed_seed) run.run.seed = ctx.seed;
    GradedRun baseline;
    try {
      baseline = train_baseline(run, ctx.scratch);
    } catch (const Error& e) {
      fail_as<CaseNotTrainable>("the single-rank baseline of ", run.name, " does not train: ", e.what());
    }
    const GradedRun reference = train_graded(run, ctx.reference, ctx.scratch, {.ops = true});
    if (!reference.trained())
      fail_as<CaseNotTrainable>("the reference's run of ", run.name, " failed: ", reference.error);
    const double allowed = std::max(run.tolerance, 2 * deviation_from(reference, baseline));
    const GradedRun graded = train_graded(run, ctx.tasks, ctx.scratch, {.ops = true});
    const auto diagnosis = [&]() -> std::string {
      return diagnose ? diagnose(ctx, run, graded, baseline, allowed) : "";
    };
    CheckOutcome outcome = compare_with_baseline(graded, baseline, allowed);
    if (!outcome.passed() && graded.trained()) outcome.got += both_commands(ctx, run);
    if (!outcome.passed() && outcome.cause.empty()) outcome.cause = cause_of_training(graded, cause, cause, diagnosis);
    if (!graded.trained()) return outcome;
    const bool equal = outcome.passed();
    outcome = with_budget(std::move(outcome), graded, reference);
    // Equal but over budget: what the task's direct checks find is most often why (a unit holding a parameter
    // twice gathers it twice), beside what went over.
    if (equal && !outcome.passed())
      if (const std::string found = diagnosis_or_none(diagnosis); !found.empty())
        outcome.cause += std::string(kLikelyMistake) + found;
    return outcome;
  };
  return check;
}

std::string first_failing_cause(const CheckContext& ctx, const std::vector<DirectCheck>& checks) {
  for (const DirectCheck& check : checks) {
    if (const CheckOutcome outcome = check(ctx); !outcome.passed()) return outcome.cause;
  }
  return "";
}

DifferenceCause first_failing_cause(std::vector<DirectCheck> checks) {
  return [checks = std::move(checks)](const CheckContext& ctx, const GradeCase&, const GradedRun&, const GradedRun&,
                                      double) { return first_failing_cause(ctx, checks); };
}

std::string cause_of_training(const GradedRun& graded, const std::string& race_cause, const std::string& cause,
                              const std::function<std::string()>& diagnosis) {
  const auto diagnosed = [&] { return diagnosis_or_none(diagnosis); };
  // `race_cause` and `cause` suspect a race and the numbers; a run that stopped otherwise says why it stopped.
  if (!graded.trained() && !graded.race) return stopped_cause(graded, diagnosed);
  std::string found = diagnosed();
  if (!found.empty()) return found;
  return graded.race ? race_cause : cause;
}

CheckOutcome trains_equal_at(const CheckContext& ctx, const std::string& race_cause, GradeCase c,
                             const std::vector<int>& worlds, const std::string& cause, DifferenceCause diagnose) {
  if (!c.fixed_seed) c.run.seed = ctx.seed;
  const GradedRun baseline = train_baseline(c, ctx.scratch);
  int equal = 0;
  CheckOutcome first;
  for (int world : worlds) {
    c.run.world = world;
    const GradedRun reference = train_graded(c, ctx.reference, ctx.scratch);
    const double allowed = std::max(c.tolerance, 2 * deviation_from(reference, baseline));
    const GradedRun graded = train_graded(c, ctx.tasks, ctx.scratch);
    CheckOutcome outcome = compare_with_baseline(graded, baseline, allowed);
    if (outcome.passed()) {
      ++equal;
    } else if (first.passed()) {
      first = std::move(outcome);
      first.got = "W = " + std::to_string(world) + ": " + first.got + both_commands(ctx, c);
      first.cause = cause_of_training(graded, race_cause, cause, [&]() -> std::string {
        return diagnose ? diagnose(ctx, c, graded, baseline, allowed) : "";
      });
    }
  }
  if (first.passed()) return first;
  first.fraction = static_cast<double>(equal) / static_cast<double>(worlds.size());
  return first;
}

std::string error_raised(const std::function<void()>& call) {
  try {
    call();
  } catch (const TaskNotImplemented&) {
    throw;
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string impl_flag(int task, const std::string& impl) { return "--impl " + std::to_string(task) + "=" + impl; }

std::string with_program(std::string text, const std::string& program) {
  for (const std::string_view verb : {"fsdplab run ", "fsdplab gui ", "fsdplab bench "}) {
    std::size_t at = text.find(verb);
    while (at != std::string::npos) {
      const bool starts_word = at == 0 || text[at - 1] == ' ' || text[at - 1] == '(' || text[at - 1] == '`';
      std::size_t next = at + verb.size();
      if (starts_word) {
        text.replace(at, std::string_view("fsdplab").size(), program);
        next = at + program.size() + 1;
      }
      at = text.find(verb, next);
    }
  }
  return text;
}

std::string show_command(const Check& check, const std::string& impl, const std::string& program) {
  std::string command = check.show;
  if (command.starts_with("fsdplab ")) command.replace(0, std::string_view("fsdplab").size(), program);
  const std::size_t at = command.find("{impl}");
  if (at != std::string::npos) command.replace(at, 6, impl_flag(check.task, impl));
  // The reference graded (grade --impl reference) has no other code to show beside it: the dashboard's own
  // comparison (SYNC beside ASYNC) instead, as --compare impl with nothing replaced is refused.
  if (impl == "reference")
    if (const std::size_t compare = command.find(" --compare impl"); compare != std::string::npos)
      command.erase(compare, std::string_view(" --compare impl").size());
  return command;
}

}  // namespace fsdplab::grading
