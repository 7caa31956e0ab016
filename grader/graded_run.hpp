// graded_run.hpp — the trainings a check runs, and what it reads back: losses, final parameters, each
// rank's op graph (the virtual clock's begin and end of every op, its stream, its labels) and its memory
// ledger; the single-rank baseline they must equal; the budgets beside the reference's.
//
// Everything here is deterministic: the sim device's virtual clock, never wall time, so the same code
// gets the same points on every machine and every run.
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/fsdp/flat_param_layout.hpp"
#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/fsdp/sharding.hpp"
#include "engine/fsdp/unit_plan.hpp"
#include "engine/runtime/memory_ledger.hpp"
#include "engine/runtime/op.hpp"
#include "engine/runtime/race_detector.hpp"
#include "engine/train/loss_agreement.hpp"
#include "engine/train/model_factory.hpp"
#include "engine/train/run_config.hpp"
#include "grader/grade_check.hpp"

namespace fsdplab::grading {

// A training case: the run, the FSDP options and how close to the single-rank baseline it must come.
// The built-in checks make them in code; a course's held-out cases come as files (grading_cases.hpp).
struct GradeCase {
  std::string name;  // "gpt2 test-tiny W3": for the report
  RunConfig run;     // run.world ranks; see small_gpt2()
  FsdpOptions options;
  double tolerance = kLossTolerance;  // relative for the losses (loss_agreement.hpp), absolute for the final parameters
  bool fixed_seed = false;  // run.seed as given (a held-out case); else the grader's --seed
  bool dry_run = false;     // time and memory only (sim_device.hpp): schedules of models too big to compute here

  // The fsdplab command that runs this case with `impl_flag` ("--impl 3=student"; "" for the reference), for the
  // diagnostics.
  std::string command(const std::string& verb, const std::string& impl_flag) const;
  // A check's show command for task `task` on this case: the dashboard with "{impl}" graded, paused where the
  // task's work shows (break_flag).
  std::string dashboard_command(int task) const;
};

// The dashboard's --break for a check of task `task` in a run of `options` on `world` ranks, with its leading space:
// the task's own events (" --break task:3"); for task 7, whose plan_units runs once before the first step and reports
// no event, the units' pre-forwards, which walk its plan in order (its only events are the loss all-reduce's); "" for
// a task with no events of its own in such a run (task_reports_events).
std::string break_flag(int task, const FsdpOptions& options, int world);

// gpt2 test-tiny on `world` ranks: 12 sequences of 16 tokens a step (12 split evenly over 1, 2, 3, 4 and
// 6 ranks), 3 steps of AdamW at lr 1e-3 — big enough that every unit is cut between ranks, small enough
// that a check trains in well under a second.
GradeCase small_gpt2(int world);
// small_gpt2(1) in bf16: where a task that skips its collective at W = 1 meets the engine's bf16 cast of the shard
// (all-gather stream) or widening of the gradient (reduce-scatter stream), a race. Tasks 3's and 4's stream checks
// show their W = 1 failures on it.
GradeCase one_rank_in_bf16();

// What a graded training gives back.
struct GradedRun {
  std::string error;  // empty when it trained to the end; else the Error it ended with
  // The race detector's report where the error is its (two unordered accesses: both ops, the buffer's tags, whether
  // it was freed and reused between them), for a cause that names the code that left them unordered.
  std::optional<RaceReport> race;
  bool todo = false;  // the error is a TODO's: a method the task has not implemented yet
  bool unused_prefetch = false;  // the error is an UnusedPrefetch: after() named a unit the pass never ran again
  bool raw_pointer = false;      // the error is a HostTouchedDeviceMemory: device memory touched by the host
  bool collective_hang = false;  // the error is a CollectiveTimedOut: a collective not every rank of its group made
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;  // the final parameters, by name
  std::vector<std::vector<OpRecord>> ops;            // each rank's op graph (RunWanted::ops)
  std::vector<TagBytes> peaks;                       // each rank's peak bytes by tag
  std::vector<std::vector<TagBytes>> live_at_step_end;  // [rank][step]: the bytes each step left allocated, by tag
  bool trained() const { return error.empty(); }
};

struct RunWanted {
  bool ops = false;     // keep each rank's op graph
  bool params = true;   // read the final parameters back
};

// Trains `c` with `tasks` (FSDP on c.run.world ranks). An error is kept in the result, never thrown.
GradedRun train_graded(const GradeCase& c, const FsdpTasks& tasks, const std::filesystem::path& scratch,
                       RunWanted wanted = {});
// The single-rank baseline of `c` (no FSDP): what every world size must equal.
GradedRun train_baseline(const GradeCase& c, const std::filesystem::path& scratch);

// A case that the single-rank baseline or the reference itself cannot train (a held-out case's learning rate that
// diverges): the case is at fault, not the graded code, and the check says so (check_process.cpp).
class CaseNotTrainable : public Error {
 public:
  using Error::Error;
};

// Within `tolerance` of the baseline, losses (relative) and final parameters (absolute); else the
// diagnostic's "got": the first step off and the worst parameter.
CheckOutcome compare_with_baseline(const GradedRun& graded, const GradedRun& baseline, double tolerance);
// How far a trained run is from the baseline: the larger of its worst relative loss difference and its worst
// absolute parameter difference.
double deviation_from(const GradedRun& run, const GradedRun& baseline);

// Where `run` first leaves the baseline, for a cause: "step 1's loss already differs, before any update" (the model
// the forward reads is not the baseline's), "step 1's loss is the baseline's and step 3's is not: an update
// differs", "the losses agree and the final parameters do not"; "the losses and the final parameters agree" for a
// run that does not leave it (its cause is elsewhere: a budget); "the run stopped before its end" for a run that
// failed. Losses compare as compare_with_baseline's, within `tolerance` (relative).
std::string divergence_text(const GradedRun& run, const GradedRun& baseline, double tolerance);

// ---- where the ranks cut the parameters ------------------------------------------------------------

// The FSDP units of `c`'s model, each laid out by the reference for c's shard group: what each rank of a training
// of `c` holds, for a diagnostic that asks the graded task about the very units the training used.
struct CaseUnits {
  BuiltModel built;  // owns the parameters the plans and layouts point at
  std::vector<UnitPlan> plans;
  std::vector<FlatParamLayout> layouts;
};
CaseUnits case_units(const GradeCase& c);

// "cut between ranks 0 and 1" where `layout` puts a chunk boundary inside parameter `p`, "" where one chunk holds it
// whole. A world that does not divide the sizes cuts parameters there; a cause names it.
std::string cut_text(const FlatParamLayout& layout, const Parameter& p);
// Rank `rank`'s chunk of `layout` as a cause names it: "rank 2's chunk (the last: 8 of its 48 elements padding)",
// "rank 2's chunk (the last, all padding)"; just "rank 0's chunk" where it holds no padding.
std::string chunk_text(const FlatParamLayout& layout, int rank);

// ---- budgets ---------------------------------------------------------------------------------------

struct RunBudget {
  int collectives = 0;          // per rank, the most of any rank
  double bytes_moved = 0;       // by rank 0's collectives, in MB
  TagBytes peak{};              // the most of any rank, per tag
  double overlap_percent = 0;   // of rank 0's communication time that overlaps compute (trace_metrics.hpp's)
  double exposed_ns = 0;        // rank 0's communication time that does not (virtual ns)
};
RunBudget budget_of(const GradedRun& run);
// Half the points for a run that passes its check but spends more than the reference on the same case:
// more collectives or bytes, a higher memory peak of a tag FSDP owns, or less overlap (by more than 1 point) with
// more communication time exposed.
CheckOutcome over_budget(const RunBudget& graded, const RunBudget& reference);
// Collectives, MB moved, peak param_full, grad_full and optim_state (param_shard and grad_shard where the two differ,
// comm_buffer where either run makes staging copies), overlap — the graded beside the reference.
std::vector<BudgetLine> budget_lines(const RunBudget& graded, const RunBudget& reference);
// `outcome` with the budget of `graded` beside `reference`'s (runs of one case, op graphs kept), as every check that
// trains beside the reference shows it; an outcome that passed gets over_budget's verdict. A budget that is shown
// counts: a schedule or memory check that passes its own test but spends more (less overlap after a host sync, a
// bigger peak) earns half, as a training equal to the baseline does.
CheckOutcome with_budget(CheckOutcome outcome, const GradedRun& graded, const GradedRun& reference);
// What follows the budget's symptoms ("correct but wasteful: ...") in the cause of a pass over budget where the check
// found the mistake behind them.
inline constexpr std::string_view kLikelyMistake = "; the likely mistake: ";

// A check that `c`, trained with the graded tasks, equals the single-rank baseline within c.tolerance —
// or within twice the reference's own distance from it where rounding takes the reference further (AdamW
// turns the rounding of a near-zero gradient into a full step: see tests/integration/test_fsdp_equivalence.cpp)
// — with the budget beside the reference's training of the same case. `cause` names the likely mistake of a run that
// differs or that the race detector stopped; `diagnose`, where given, reads it from what the run shows, for a run
// that differs, raced, or stopped with an error that is neither a TODO nor an UnusedPrefetch ("", or an
// exception, leaves it to `cause`, or to stopped_cause's last words for a run that stopped), and for a run equal but
// over budget (what it names follows kLikelyMistake).
using DifferenceCause = std::function<std::string(const CheckContext& ctx, const GradeCase& c, const GradedRun& graded,
                                                  const GradedRun& baseline, double tolerance)>;
Check equivalence_check(int task, std::string id, std::string title, int points, GradeCase c, std::string cause,
                        DifferenceCause diagnose = {});
// One of a task's checks that call its methods directly.
using DirectCheck = std::function<CheckOutcome(const CheckContext&)>;
// The cause of the first of `checks` that fails, run in order ("" when all pass): the mistake a training shows is
// most often one of them, on its own.
std::string first_failing_cause(const CheckContext& ctx, const std::vector<DirectCheck>& checks);
// The same as a `diagnose`.
DifferenceCause first_failing_cause(std::vector<DirectCheck> checks);

// The cause of a training that differs from the baseline, raced or stopped: `diagnosis` (where it names one, and
// unless the run stopped at a TODO), else `race_cause` for a race, `cause` for a difference, stopped_cause for a
// run that stopped otherwise. A diagnosis that throws (the graded code refused its calls) names none.
std::string cause_of_training(const GradedRun& graded, const std::string& race_cause, const std::string& cause,
                              const std::function<std::string()>& diagnosis);

// Losses and final parameters of `c` equal to the single-rank baseline's at each of `worlds` (one baseline for
// all), with the allowance equivalence_check gives; the fraction of worlds that are. The first miss is the
// diagnostic, with the command that reproduces it, and its cause cause_of_training's (`race_cause` for a race,
// `cause` for a difference, either after what `diagnose` reads, where given).
CheckOutcome trains_equal_at(const CheckContext& ctx, const std::string& race_cause, GradeCase c,
                             const std::vector<int>& worlds, const std::string& cause, DifferenceCause diagnose = {});

// A world's error without its "rank R failed: ": which rank failed first depends on the threads' timing, and the
// error names its rank itself where that matters.
std::string without_failed_rank(std::string error);
// "the run failed: <error>" as a diagnostic's "got", with the race detector's or a TODO's wording.
std::string failure_text(const GradedRun& run);
// A training that stopped before its end, as a failed outcome: failure_text as its "got", followed by `command`
// (the command that reproduces it) where one is given, `cause`, and `raced` where the race detector stopped it.
CheckOutcome stopped_training(std::string expected, const GradedRun& run, std::string cause,
                              const std::string& command = "");
// The cause of a run that stopped with an error other than the race detector's: kTodoLeft, kRawPointerCause,
// kCollectiveHangCause, after() for an UnusedPrefetch, what `diagnosis` (where given) reads from what the run shows,
// else "the run failed: see got" — never a suspect of the check's own, which the run never reached.
std::string stopped_cause(const GradedRun& run, const std::function<std::string()>& diagnosis = {});

}  // namespace fsdplab::grading
