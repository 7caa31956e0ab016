// The grader's machinery, graded against implementations made to fail: a crashing and a hanging task each
// lose only the points of the checks that call the broken method (every check runs in its own process
// with a time limit, and the report names the crash's frame); grades are the same on every run; held-out
// cases load from files, and a malformed one is refused by name; every task has checks and mutants.
// (`fsdplab grade` itself — the reference's 100 %, the skeleton's 0, every mutant caught — is run by the
// cli tests in tests/CMakeLists.txt.)
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "engine/fsdp/integration_task.hpp"
#include "engine/fsdp/lab_todo.hpp"
#include "engine/fsdp/overlap_task.hpp"
#include "engine/train/world.hpp"
#include "grader/check_catalog.hpp"
#include "grader/diagnostic_text.hpp"
#include "grader/grade_report.hpp"
#include "grader/graded_run.hpp"
#include "grader/grading.hpp"
#include "grader/grading_cases.hpp"
#include "grader/rank_harness.hpp"
#include "labs/mutants/mutants.hpp"
#include "labs/student_tasks.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using namespace grading;
using testing::contains;
using testing::error_of;

// Task 2 with a plan that dies of SIGSEGV, as a bad pointer would; the rest is the reference's. (Raised, not a
// store through a null pointer: UBSan, in the asan preset, would stop such a store before the signal.)
class CrashingPlan final : public FlatParameterTask {
 public:
  FlatParamLayout plan(std::span<Parameter* const>, int, std::int64_t) const override {
    std::raise(SIGSEGV);
    return {};
  }
  std::vector<ShardSlice> shard_slices(const FlatParamLayout& layout, int rank) const override {
    return reference_flat_parameter().shard_slices(layout, rank);
  }
  void point_views(const FlatParamLayout& layout, const Tensor& flat, Tensor Parameter::*field) const override {
    reference_flat_parameter().point_views(layout, flat, field);
  }
};

// Task 2 whose shard_slices never returns; the rest is the reference's.
class HangingSlices final : public FlatParameterTask {
 public:
  FlatParamLayout plan(std::span<Parameter* const> params, int world, std::int64_t align) const override {
    return reference_flat_parameter().plan(params, world, align);
  }
  std::vector<ShardSlice> shard_slices(const FlatParamLayout&, int) const override {
    for (volatile bool forever = true; forever;) {
    }
    return {};
  }
  void point_views(const FlatParamLayout& layout, const Tensor& flat, Tensor Parameter::*field) const override {
    reference_flat_parameter().point_views(layout, flat, field);
  }
};

// Task 2 whose shard_slices ends the process with exit(0); the rest is the reference's.
class ExitingSlices final : public FlatParameterTask {
 public:
  FlatParamLayout plan(std::span<Parameter* const> params, int world, std::int64_t align) const override {
    return reference_flat_parameter().plan(params, world, align);
  }
  std::vector<ShardSlice> shard_slices(const FlatParamLayout&, int) const override { std::exit(0); }
  void point_views(const FlatParamLayout& layout, const Tensor& flat, Tensor Parameter::*field) const override {
    reference_flat_parameter().point_views(layout, flat, field);
  }
};

// `impl` graded in task `task` alone, as `fsdplab grade --task TASK --impl IMPL` does.
GradeReport grade_task(const std::string& impl, int task) {
  GradeRequest request;
  request.impl = parse_impl(impl);
  request.tasks = {task};
  return grade(request);
}

const Check& check_named(const std::vector<Check>& checks, const std::string& id) {
  for (const Check& c : checks)
    if (c.id == id) return c;
  throw Error("no check '" + id + "'");
}

// Task `task`'s checks `ids`, each in its own process, with `impl` in the task's slot.
std::vector<CheckRun> run_checks(int task, const FsdpTask& impl, const std::vector<std::string>& ids, double seconds) {
  const std::vector<Check> checks = task_checks(task);
  FsdpTasks tasks = reference_tasks();
  tasks.set(task, impl);
  std::vector<CheckJob> jobs;
  for (const std::string& id : ids) jobs.push_back({&check_named(checks, id), tasks, "student", 0});
  return run_isolated(jobs, {seconds, 2});
}

std::vector<CheckRun> run_task2(const FlatParameterTask& impl, const std::vector<std::string>& ids, double seconds) {
  return run_checks(2, impl, ids, seconds);
}

TEST(GraderIsolation, ACrashCostsOnlyTheChecksThatCallTheCrashingMethod) {
  static const CrashingPlan crashing;
  // "views" plans with the reference and calls only point_views; the others call plan.
  const std::vector<CheckRun> runs = run_task2(crashing, {"padding", "views", "training-W3"}, 60);
  for (std::size_t i : {0u, 2u}) {
    EXPECT_EQ(runs[i].end, CheckEnd::crashed) << runs[i].outcome.got;
    EXPECT_EQ(runs[i].outcome.fraction, 0);
    // The frame named is the crashing method, in this file.
    EXPECT_TRUE(
        contains(runs[i].outcome.got, "crashed with SIGSEGV in CrashingPlan::plan (tests/grader/test_grader.cpp:"))
        << runs[i].outcome.got;
  }
  EXPECT_EQ(runs[1].end, CheckEnd::finished) << runs[1].outcome.got;
  EXPECT_EQ(runs[1].outcome.fraction, 1);
}

// exit() in the graded code, on the grader's thread or a rank's: named as such, not as the crash the static
// destructors could cause under the ranks still running ([Note: exit() in the graded code]).
TEST(GraderIsolation, AnExitInTheGradedCodeIsNamedAsOne) {
  static const ExitingSlices exiting;
  const std::vector<CheckRun> runs = run_task2(exiting, {"padding", "slices", "training-W3"}, 60);
  EXPECT_EQ(runs[0].end, CheckEnd::finished) << runs[0].outcome.got;  // plan only
  for (std::size_t i : {1u, 2u}) {
    EXPECT_EQ(runs[i].end, CheckEnd::crashed) << runs[i].outcome.got;
    EXPECT_EQ(runs[i].outcome.fraction, 0);
    EXPECT_TRUE(contains(runs[i].outcome.got, "the process ended in the middle of the check: exit() was called"))
        << runs[i].outcome.got;
    EXPECT_TRUE(contains(runs[i].outcome.cause, "exit() (or std::exit) in the graded code")) << runs[i].outcome.cause;
  }
}

// A hang costs its checks, and says where the code was: the loop's own frame, in this file ([Note: where a hang was]).
TEST(GraderIsolation, AHangCostsOnlyItsChecksAndTheGraderGoesOn) {
  static const HangingSlices hanging;
  const std::vector<CheckRun> runs = run_task2(hanging, {"padding", "slices", "training-W3"}, 2);
  EXPECT_EQ(runs[0].end, CheckEnd::finished) << runs[0].outcome.got;  // plan only
  EXPECT_EQ(runs[0].outcome.fraction, 1);
  for (std::size_t i : {1u, 2u}) {
    EXPECT_EQ(runs[i].end, CheckEnd::timed_out) << runs[i].outcome.got;
    EXPECT_EQ(runs[i].outcome.fraction, 0);
    EXPECT_TRUE(runs[i].outcome.got.starts_with("check timed out after 2 s")) << runs[i].outcome.got;
#if !defined(__SANITIZE_THREAD__)  // TSan holds a signal back from a thread spinning outside its interceptors
    EXPECT_TRUE(contains(runs[i].outcome.got,
                         "check timed out after 2 s in HangingSlices::shard_slices (tests/grader/test_grader.cpp:"))
        << runs[i].outcome.got;
#endif
  }
}

// One padding mistake is named as what it is, in the padding check and in every check whose layout it changes:
// no check blames its own suspect (alignment, rounding down, a parameter given whole, empty slices) for it.
TEST(GraderDiagnostics, APaddingMistakeIsNamedWhereverTheLayoutShowsIt) {
  const std::vector<CheckRun> none = run_checks(2, find_mutant(2, "no-padding").impl(), {"padding", "alignment"}, 60);
  ASSERT_EQ(none[0].outcome.fraction, 0) << none[0].outcome.got;
  EXPECT_TRUE(contains(none[0].outcome.cause, "no padding: padded_numel = used_numel")) << none[0].outcome.cause;
  EXPECT_FALSE(contains(none[0].outcome.cause, "off by one")) << none[0].outcome.cause;
  ASSERT_EQ(none[1].outcome.fraction, 0) << none[1].outcome.got;  // a wrong layout is still wrong
  EXPECT_TRUE(contains(none[1].outcome.got, "padded_numel 13, expected 15")) << none[1].outcome.got;
  EXPECT_TRUE(contains(none[1].outcome.cause, "the layout's padded_numel differs (see the padding check): no padding"))
      << none[1].outcome.cause;
  EXPECT_FALSE(contains(none[1].outcome.cause, "alignment left out")) << none[1].outcome.cause;

  // The padding check and odd-world (layouts and slices at random sizes) lose their points and name the padding; the
  // slice checks grade the graded slicing of the reference's layout, which a padding mistake leaves right.
  const FsdpTask& off_by_one = find_mutant(2, "padding-off-by-one").impl();
  const std::vector<std::string> ids = {"padding", "odd-world", "slices", "cut-parameter", "rank-owns-none"};
  const std::vector<CheckRun> runs = run_checks(2, off_by_one, ids, 60);
  EXPECT_TRUE(contains(runs[0].outcome.cause, "padding off by one: used_numel")) << runs[0].outcome.cause;
  EXPECT_EQ(runs[1].outcome.fraction, 0);
  EXPECT_TRUE(contains(runs[1].outcome.got, "padded_numel")) << runs[1].outcome.got;
  EXPECT_TRUE(
      contains(runs[1].outcome.cause, "the layout's padded_numel differs (see the padding check): padding off by one"))
      << runs[1].outcome.cause;
  for (std::size_t i = 2; i < ids.size(); ++i)
    EXPECT_TRUE(runs[i].outcome.passed()) << ids[i] << ": " << runs[i].outcome.got;
}

// A task that throws what is not an fsdplab::Error (std::invalid_argument for an empty unit) is told so by the
// exception's type, and what the contract asks instead: not "nothing is thrown", where the contract names an error.
TEST(GraderDiagnostics, AnExceptionThatIsNotAnErrorIsNamedByItsType) {
  class ThrowsInvalidArgument final : public FlatParameterTask {
   public:
    FlatParamLayout plan(std::span<Parameter* const>, int, std::int64_t) const override {
      throw std::invalid_argument("empty");
    }
    std::vector<ShardSlice> shard_slices(const FlatParamLayout&, int) const override { return {}; }
    void point_views(const FlatParamLayout&, const Tensor&, Tensor Parameter::*) const override {}
  };
  const ThrowsInvalidArgument task;
  const std::vector<CheckRun> runs = run_task2(task, {"bad-input"}, 60);
  EXPECT_EQ(runs[0].end, CheckEnd::threw);
  EXPECT_EQ(runs[0].outcome.got, "threw std::invalid_argument: empty");
  EXPECT_TRUE(contains(runs[0].outcome.cause,
                       "an exception that is not an fsdplab::Error: where the task's contract "
                       "names an error, raise it with check() or fail()"))
      << runs[0].outcome.cause;
}

// A slice's wrong field is named in the space it was counted in: param_begin counted in the shard is not read as
// "offsets counted from the parameter", and the slices of another rank's chunk say whose.
TEST(GraderDiagnostics, ASliceMistakeIsNamedByWhatTheSlicesShow) {
  const std::vector<CheckRun> shard_space =
      run_checks(2, find_mutant(2, "param-begin-in-shard-space").impl(), {"slices", "cut-parameter"}, 60);
  for (const CheckRun& run : shard_space) {
    EXPECT_EQ(run.outcome.fraction, 0) << run.outcome.got;
    EXPECT_TRUE(contains(run.outcome.cause, "param_begin in shard space (lo - begin")) << run.outcome.cause;
    EXPECT_TRUE(contains(run.outcome.cause, "(lo - e.offset)")) << run.outcome.cause;
    EXPECT_FALSE(contains(run.outcome.cause, "counted from the parameter instead of the shard")) << run.outcome.cause;
  }
  const std::vector<CheckRun> wrong_rank = run_checks(2, find_mutant(2, "wrong-rank-slices").impl(), {"slices"}, 60);
  EXPECT_TRUE(contains(wrong_rank[0].outcome.cause, "rank 0 given the slices of rank 1's chunk"))
      << wrong_rank[0].outcome.cause;
  const std::vector<CheckRun> dropped =
      run_checks(2, find_mutant(2, "drops-cut-parameters").impl(), {"cut-parameter"}, 60);
  EXPECT_TRUE(contains(dropped[0].outcome.cause, "a parameter cut by a chunk boundary left out"))
      << dropped[0].outcome.cause;
}

// A training at W = 3 that leaves the baseline names the mistake in the task's code, found by asking the task about
// the very units the run trained: where 3 cuts a parameter between chunks, which piece is wrong and why.
TEST(GraderDiagnostics, AnUnevenWorldsTrainingNamesWhatDiverged) {
  const auto cause_of = [](int task, std::string_view mutant) {
    const std::vector<CheckRun> runs = run_checks(task, find_mutant(task, mutant).impl(), {"training-W3"}, 60);
    EXPECT_EQ(runs[0].outcome.fraction, 0) << mutant;
    return runs[0].outcome.cause;
  };
  const std::string from_zero = cause_of(1, "index-from-zero");
  EXPECT_TRUE(contains(from_zero, "step 1's loss already differs, before any update")) << from_zero;
  EXPECT_TRUE(contains(from_zero, "in rank 1's chunk, transformer.wte.weight cut across ranks 0 to 2")) << from_zero;
  EXPECT_TRUE(contains(from_zero, "pass s.param_begin (875) as ParamInit::fill's first_index")) << from_zero;
  const std::string rank_seed = cause_of(1, "rank-seed");
  EXPECT_TRUE(contains(rank_seed, "the rank enters the draw")) << rank_seed;
  const std::string dropped = cause_of(2, "drops-cut-parameters");
  EXPECT_TRUE(contains(dropped, "rank 0, slice 0: nothing, expected {transformer.wte.weight [0, 875)")) << dropped;
  EXPECT_TRUE(contains(dropped, "a parameter cut by a chunk boundary left out")) << dropped;
  const std::string copies = cause_of(2, "views-that-copy");  // NaN losses stop the run: still diagnosed
  EXPECT_TRUE(contains(copies, "point_views on this run's unit '(root)'")) << copies;
  EXPECT_TRUE(contains(copies, "views that copy")) << copies;
}

// A budget shown is a budget that counts: a check that passes its own test beside the reference (task 3's memory
// check: the peak and the gathers are right) but whose run hides less communication earns half, saying by how much.
TEST(GraderBudget, LessOverlapThanTheReferenceCostsHalfWhereverTheBudgetIsShown) {
  const std::vector<CheckRun> runs = run_checks(3, find_mutant(3, "host-sync").impl(), {"memory"}, 60);
  const CheckOutcome& o = runs[0].outcome;
  EXPECT_EQ(o.fraction, 0.5) << o.got;
  EXPECT_TRUE(contains(o.got, "passed, but overlap 31.19 % against the reference's 34.45 %")) << o.got;
  // Its cause is the overlap, never the memory the check is titled for.
  EXPECT_TRUE(contains(o.cause, "correct but wasteful: less communication hidden under compute than the reference's"))
      << o.cause;
  EXPECT_FALSE(contains(o.cause, "memory")) << o.cause;
  EXPECT_FALSE(o.budget.empty());
  // Counts are said whole, as the budget line prints them.
  RunBudget mine, theirs;
  mine.collectives = 32;
  theirs.collectives = 30;
  const CheckOutcome more_collectives = over_budget(mine, theirs);
  EXPECT_EQ(more_collectives.got, "passed, but collectives 32 against the reference's 30");
  EXPECT_EQ(more_collectives.cause,
            "correct but wasteful: more communication than the task needs (a collective too many, or more bytes)");
}

// A TODO the training met is said as a TODO, not as a mistake in the numbers.
class TodoInit final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice>, const Tensor&, std::uint64_t) const override {
    todo(1, "MetaInitTask::init_shard");
  }
};

TEST(GraderDiagnostics, ATrainingStoppedByATodoSaysSo) {
  const TodoInit todo_left;
  const std::vector<CheckRun> runs = run_checks(1, todo_left, {"training-W3"}, 60);
  EXPECT_TRUE(contains(runs[0].outcome.got, "a TODO is left")) << runs[0].outcome.got;
  EXPECT_EQ(runs[0].outcome.cause, "a TODO is left in the task");
}

// Task 6 as the reference, but for begin_forward, which stops the run: with a TODO, or with an Error that names no
// mistake.
class OverlapStoppedAtBeginForward final : public OverlapTask {
 public:
  explicit OverlapStoppedAtBeginForward(bool todo_left) : todo_left_(todo_left) {}
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    return reference_overlap().acquire_full(unit, rank, prefetch);
  }
  void release_full(FsdpUnit& unit, FsdpRank& rank) const override { reference_overlap().release_full(unit, rank); }
  void acquire_grad(FsdpUnit& unit, FsdpRank& rank) const override { reference_overlap().acquire_grad(unit, rank); }
  void release_grad(FsdpUnit& unit, FsdpRank& rank) const override { reference_overlap().release_grad(unit, rank); }
  void release_staging(Tensor staging, const Event& done, FsdpRank& rank) const override {
    reference_overlap().release_staging(std::move(staging), done, rank);
  }
  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    return reference_overlap().after(point, unit, rank);
  }
  void begin_forward(FsdpRank&) const override {
    if (todo_left_) todo(6, "OverlapTask::begin_forward");
    throw Error("the forward could not begin");
  }
  void end_backward(FsdpRank& rank) const override { reference_overlap().end_backward(rank); }

 private:
  bool todo_left_;
};

// A task 6 run that stopped says why in every check's cause: a TODO as a TODO, an engine error that names the
// mistake (a prefetched unit never used) as that mistake, any other error as the run's failure — never one of the
// check's own suspects, which the run never reached.
TEST(GraderDiagnostics, AStoppedScheduleSaysWhyItStopped) {
  const std::vector<std::string> ids = {"sync-overlaps-nothing",
                                        "forward-prefetch",
                                        "backward-prefetch",
                                        "step-time",
                                        "rate-limiter",
                                        "gathers-after-optimizer",
                                        "pool",
                                        "training-pool"};
  const OverlapStoppedAtBeginForward todo_left(true), raising(false);
  const std::vector<CheckRun> todo_runs = run_checks(6, todo_left, ids, 120);
  const std::vector<CheckRun> error_runs = run_checks(6, raising, ids, 120);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(todo_runs[i].outcome.fraction, 0) << ids[i];
    EXPECT_EQ(todo_runs[i].outcome.cause, "a TODO is left in the task") << ids[i] << ": " << todo_runs[i].outcome.got;
    EXPECT_EQ(error_runs[i].outcome.fraction, 0) << ids[i];
    EXPECT_EQ(error_runs[i].outcome.cause, "the run failed: see got") << ids[i] << ": " << error_runs[i].outcome.got;
  }
  const std::vector<std::string> prefetching = {"forward-prefetch", "backward-prefetch", "step-time", "training-async"};
  const std::vector<CheckRun> wrong_unit = run_checks(6, find_mutant(6, "prefetches-itself").impl(), prefetching, 120);
  for (std::size_t i = 0; i < prefetching.size(); ++i) {
    EXPECT_TRUE(contains(wrong_unit[i].outcome.got, "was prefetched in this pass but never used"))
        << prefetching[i] << ": " << wrong_unit[i].outcome.got;
    EXPECT_TRUE(contains(wrong_unit[i].outcome.cause, "after() named a unit that does not run later in the pass"))
        << prefetching[i] << ": " << wrong_unit[i].outcome.cause;
  }
}

// A step slower than the reference's is blamed on what its op graph shows: the host waiting, backward gathers that
// overlap nothing, a limiter holding prefetches; the limiter's memory is told off by one from not limited at all, and
// both from a backward prefetch out of turn, which holds memory the limit did not plan for; a training over budget
// names the same.
TEST(GraderDiagnostics, ASlowStepAndAnOverfullLimiterAreNamedByWhatTheRunShows) {
  const auto cause_of = [](std::string_view mutant, const std::string& id) {
    const std::vector<CheckRun> runs = run_checks(6, find_mutant(6, mutant).impl(), {id}, 120);
    EXPECT_LT(runs[0].outcome.fraction, 1) << mutant << " " << id;
    return runs[0].outcome;
  };
  const std::string host_sync = cause_of("host-sync", "step-time").cause;
  EXPECT_TRUE(contains(host_sync, "the host waited for the device: 25 ops issued once it had run dry")) << host_sync;
  const std::string no_backward = cause_of("no-backward-prefetch", "step-time").cause;
  EXPECT_TRUE(contains(no_backward, "after(pre_backward) names no unit")) << no_backward;
  EXPECT_FALSE(contains(no_backward, "device.synchronize")) << no_backward;
  for (const std::string id : {"step-time", "forward-prefetch"}) {
    const std::string root = cause_of("limiter-counts-the-root", id).cause;
    EXPECT_TRUE(contains(root, "the rate limiter held prefetches") && contains(root, "not rate_limited"))
        << id << ": " << root;
  }
  const CheckOutcome off_by_one = cause_of("limiter-off-by-one", "rate-limiter");
  EXPECT_TRUE(contains(off_by_one.cause, "one gathered Block more than the limit")) << off_by_one.cause;
  const CheckOutcome out_of_turn = cause_of("prefetches-the-forwards-next", "rate-limiter");
  EXPECT_TRUE(contains(out_of_turn.cause, "the backward prefetch gathered units out of turn (5 backward collectives"))
      << out_of_turn.cause;
  const CheckOutcome unlimited = cause_of("no-limit", "rate-limiter");
  EXPECT_TRUE(contains(unlimited.got, "--max-inflight 1: peak param_full 781.4 MB, the reference's 186 MB"))
      << unlimited.got;
  EXPECT_TRUE(contains(unlimited.cause,
                       "param_full up to 21 Blocks' worth above the reference's (buffers parked for their last "
                       "reader count too): the host never waits"))
      << unlimited.cause;
  // BackwardPrefetch::post is graded beside pre, and its cause names its own point.
  const CheckOutcome post = cause_of("no-post-backward-prefetch", "backward-prefetch");
  EXPECT_TRUE(contains(post.cause, "after(post_backward) must return the unit whose backward comes next"))
      << post.cause;
  EXPECT_TRUE(contains(post.expected, "--prefetch backward-post: ")) << post.expected;
  // The replica's gradient (no_shard) treated as a unit's own stops the run on a freed buffer, named as such.
  const CheckOutcome replica = cause_of("frees-the-replica-gradient", "training-replicated");
  EXPECT_TRUE(contains(replica.cause, "the replica's gradient allocated or freed as a unit's own")) << replica.cause;
  // The training that passes over budget names what the schedule checks found, after the budget's symptoms.
  for (const auto& [mutant, mistake] :
       {std::pair{"host-sync", "the host waited for the device: 25 ops issued once it had run dry"},
        std::pair{"limiter-off-by-one", "one gathered Block more than the limit"}}) {
    const CheckOutcome training = cause_of(mutant, "training-async");
    EXPECT_TRUE(contains(training.cause, std::string("; the likely mistake: ") + mistake)) << training.cause;
  }
}

// Task 8: the replicas' all-reduce on the compute stream is a race before it is a slowdown: nothing orders it after the
// reduce-scatter that wrote grad_shard. Read from the op graph; its times said nothing (the all-reduce waits for the
// link the reduce-scatter holds), and the cause named only the compute stream's wait.
TEST(GraderDiagnostics, AnAllReduceOnTheComputeStreamIsNamedARaceFirst) {
  const std::vector<CheckRun> runs = run_checks(8, find_mutant(8, "compute-stream").impl(), {"replica-stream"}, 120);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].outcome.fraction, 0);
  EXPECT_TRUE(contains(runs[0].outcome.cause,
                       "the all-reduce on the compute stream: nothing orders it after the reduce-scatter that wrote "
                       "grad_shard on its own stream (the race detector stops a training there)"))
      << runs[0].outcome.cause;
}

// Task 6: a race names the method whose contract left it unordered, read from the buffer the race is on (its tag,
// freed and reused or not) and the case's mode: wherever the race stops a run, in the schedule checks and the
// trainings alike. Each mutant's mistake is in one method, which its cause must name.
TEST(GraderDiagnostics, ARaceNamesTheOverlapMethodThatLeftItUnordered) {
  struct Expected {
    std::string_view mutant;
    std::vector<std::string> checks;
    std::string method;
  };
  const std::vector<Expected> races = {
      {"free-at-host-time",
       {"forward-prefetch", "training-async"},
       "release_full gave unit.full back while the compute stream still read it"},
      {"sync-unordered",
       {"sync-overlaps-nothing", "training-sync"},
       "rank.device.wait_stream(Lane::all_gather, Lane::compute)"},
      {"pool-without-free-event", {"pool", "training-pool"}, "acquire_full makes the all-gather stream wait"},
      {"grad-freed-at-once", {"backward-prefetch", "training-async"}, "release_grad freed unit.grad_full"},
      {"sync-without-reduced-wait", {"sync-overlaps-nothing", "training-sync"}, "under SYNC release_grad freed"},
      {"grad-pool-without-free-event", {"pool"}, "acquire_grad makes the COMPUTE stream wait"},
      {"staging-freed-at-once", {"training-offload"}, "release_staging let a collective's temporary go at once"},
  };
  for (const Expected& race : races) {
    const std::vector<CheckRun> runs = run_checks(6, find_mutant(6, race.mutant).impl(), race.checks, 120);
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const CheckOutcome& outcome = runs[i].outcome;
      const std::string where = std::string(race.mutant) + " " + race.checks[i] + ": ";
      EXPECT_EQ(outcome.fraction, 0) << where << outcome.got;
      EXPECT_TRUE(contains(outcome.got, "the race detector stopped the run")) << where << outcome.got;
      EXPECT_TRUE(contains(outcome.cause, race.method)) << where << outcome.cause;
    }
  }
}

// Task 5: a training that updates twice a step says so, as the one-update check finds it; a make that raises on full
// sharding's units (the optimizer given the replica there has none) is named, not left to the generic error text —
// in the trainings it stopped too, each with the units of its own strategy.
TEST(GraderDiagnostics, AShardedOptimizerMistakeIsNamedWhereverItShows) {
  const std::vector<CheckRun> twice = run_checks(5, find_mutant(5, "step-twice").impl(), {"training-zero2"}, 60);
  EXPECT_EQ(twice[0].outcome.fraction, 0) << twice[0].outcome.got;
  EXPECT_TRUE(contains(twice[0].outcome.cause, "optimizer.step called more than once per call: ") &&
              contains(twice[0].outcome.cause, "(see the one-update check)"))
      << twice[0].outcome.cause;
  // W broadcasts a unit in place of one gather: named by what was issued (not as replicas left stale), and their
  // schedule graded as the gathers' would be.
  const std::vector<CheckRun> broadcasts =
      run_checks(5, find_mutant(5, "broadcasts-after-step").impl(), {"zero-gather", "gather-schedule"}, 60);
  ASSERT_EQ(broadcasts.size(), 2u);
  EXPECT_TRUE(contains(broadcasts[0].outcome.got, "rank 0 issued 9 broadcast for 3 units"))
      << broadcasts[0].outcome.got;
  EXPECT_TRUE(broadcasts[1].outcome.passed()) << broadcasts[1].outcome.got;
  // The replica where there is one: half the targets check, its zero2 half.
  const std::vector<CheckRun> zero_only = run_checks(5, find_mutant(5, "replica-target").impl(), {"targets"}, 60);
  EXPECT_EQ(zero_only[0].outcome.fraction, 0.5);
  EXPECT_TRUE(contains(zero_only[0].outcome.got, "make raised on zero2's units: ")) << zero_only[0].outcome.got;
  // The update's event recorded on the all-gather stream: named as such, not as no event.
  const std::vector<CheckRun> lane =
      run_checks(5, find_mutant(5, "update-event-on-all-gather").impl(), {"gather-schedule"}, 60);
  EXPECT_TRUE(contains(lane[0].outcome.cause, "the gathers wait for an event recorded on the all_gather stream"))
      << lane[0].outcome.cause;
  const std::vector<CheckRun> replica = run_checks(5, find_mutant(5, "replica-always").impl(), {"targets"}, 60);
  EXPECT_EQ(replica[0].end, CheckEnd::finished) << replica[0].outcome.got;
  EXPECT_TRUE(contains(replica[0].outcome.got, "make raised on full sharding's units: ")) << replica[0].outcome.got;
  EXPECT_TRUE(contains(replica[0].outcome.cause, "under full sharding a unit has no replica"))
      << replica[0].outcome.cause;
  const std::vector<CheckRun> trainings =
      run_checks(5, find_mutant(5, "replica-always").impl(), {"training-zero2", "training-W3-sgd"}, 60);
  ASSERT_EQ(trainings.size(), 2u);
  EXPECT_TRUE(contains(trainings[0].outcome.got, "the run failed: optimizer target ")) << trainings[0].outcome.got;
  EXPECT_TRUE(contains(trainings[0].outcome.cause, "the optimizer given the whole replica with the gradient shard"))
      << trainings[0].outcome.cause;
  EXPECT_TRUE(contains(trainings[1].outcome.cause, "under full sharding a unit has no replica"))
      << trainings[1].outcome.cause;
}

// Tasks 3 and 4: the trainings' causes are the direct checks' (task 3's event never recorded, which stops the run;
// task 4's NaN from an unzeroed gradient, the race of a missing event, a scale after the avg); a mistake costs the
// check of its own kind, not every check its race or error reaches (task 4's no-host-sync is clean of a missing
// event; task 3's gather-values and no-host-sync of an event never recorded, which gather-stream grades); a slower
// schedule with an extra op on the reduce-scatter stream says so.
TEST(GraderDiagnostics, ForwardAndBackwardMistakesAreNamedWhereverTheyShow) {
  const std::vector<std::string> trainings = {"memory", "overlap", "training"};
  const std::vector<CheckRun> unrecorded = run_checks(3, find_mutant(3, "never-records").impl(), trainings, 60);
  for (std::size_t i = 0; i < trainings.size(); ++i)
    EXPECT_TRUE(contains(unrecorded[i].outcome.cause, "the event not recorded: device.record(gathered"))
        << trainings[i] << ": " << unrecorded[i].outcome.cause;
  for (const CheckRun& run :
       run_checks(3, find_mutant(3, "never-records").impl(), {"gather-values", "no-host-sync"}, 60))
    EXPECT_TRUE(run.outcome.passed()) << run.outcome.got;
  // More gathers than the reference's: all_gather's own where it gathers twice, reshard_after_forward's otherwise.
  for (const CheckRun& run : run_checks(3, find_mutant(3, "gathers-twice").impl(), {"memory", "overlap"}, 60))
    EXPECT_TRUE(contains(run.outcome.cause, "all_gather issues 2 all-gathers a call")) << run.outcome.cause;
  for (const CheckRun& run : run_checks(3, find_mutant(3, "reshards-root").impl(), {"memory", "overlap"}, 60))
    EXPECT_TRUE(contains(run.outcome.cause, "reshard_after_forward")) << run.outcome.cause;
  const std::vector<CheckRun> stream = run_checks(3, find_mutant(3, "never-records").impl(), {"gather-stream"}, 60);
  EXPECT_FALSE(stream[0].outcome.passed());
  EXPECT_TRUE(contains(stream[0].outcome.cause, "the event not recorded")) << stream[0].outcome.cause;

  const std::vector<std::string> ids = {"no-host-sync", "schedule", "sgd-training"};
  const std::vector<CheckRun> unzeroed = run_checks(4, find_mutant(4, "unzeroed").impl(), ids, 60);
  for (std::size_t i = 1; i < ids.size(); ++i)
    EXPECT_TRUE(contains(unzeroed[i].outcome.cause, "grad_full not zeroed"))
        << ids[i] << ": " << unzeroed[i].outcome.cause;
  const std::vector<CheckRun> no_event = run_checks(4, find_mutant(4, "missing-wait").impl(), ids, 60);
  EXPECT_TRUE(no_event[0].outcome.passed()) << no_event[0].outcome.got;
  for (std::size_t i = 1; i < ids.size(); ++i)
    EXPECT_TRUE(contains(no_event[i].outcome.cause, "no event between the backward and the reduction"))
        << ids[i] << ": " << no_event[i].outcome.cause;
  // An event there is, but on the stream that waits: named as such, not as no event.
  const std::vector<CheckRun> own_stream = run_checks(4, find_mutant(4, "event-on-the-waiting-stream").impl(),
                                                      {"ordered-after-compute", "sgd-training"}, 60);
  for (const CheckRun& run : own_stream) {
    EXPECT_TRUE(contains(run.outcome.cause, "the reduction waits for an event recorded on the reduce_scatter stream"))
        << run.outcome.cause;
  }
  const std::vector<CheckRun> twice = run_checks(4, find_mutant(4, "averages-twice").impl(), ids, 60);
  EXPECT_TRUE(twice[0].outcome.passed()) << twice[0].outcome.got;
  EXPECT_TRUE(contains(twice[1].outcome.cause, "the reduce-scatter stream does more than the reference's (9 ops)"))
      << twice[1].outcome.cause;
  EXPECT_TRUE(contains(twice[1].outcome.got, "18 ops on the reduce-scatter stream")) << twice[1].outcome.got;
  EXPECT_TRUE(contains(twice[2].outcome.cause, "averaged twice")) << twice[2].outcome.cause;
}

// A stream wait in the wrong place: on the stream that produced the event (task 3, named as that stream's wait, not as
// no wait, in the direct check and in the training it stops), for more than the event (task 3: the whole all-gather
// stream, half the check), on the copy back that only the host reads (task 9: a quarter of the check), or on the
// all-reduce that only the optimizer needs (task 8: half the check).
TEST(GraderDiagnostics, AStreamWaitInTheWrongPlaceIsNamed) {
  struct Expected {
    int task;
    std::string_view mutant, check;
    double fraction;                         // of the check's points; -1: any less than all
    std::string_view got, cause, not_cause;  // what the diagnostic says ("" asks nothing)
  };
  const Expected expected[] = {
      {3, "waits-on-the-gather-stream", "event-wait", 0, "",
       "the all_gather stream made to wait for `gathered`, not the compute", ""},
      {3, "waits-on-the-gather-stream", "training", 0, "",
       "the all_gather stream made to wait for `gathered`, not the compute", ""},
      {3, "waits-for-the-whole-gather-stream", "event-wait", 0.5, "",
       "compute made to wait for the whole all-gather stream", ""},
      {3, "waits-for-the-whole-gather-stream", "training", 1, "", "", ""},
      // all_gather waits for nothing and makes nothing wait: read from the probe ops' dependencies.
      {3, "waits-in-all-gather", "gather-stream", 0.5, "", "a stream made to wait for the gather inside all_gather",
       ""},
      {3, "gather-waits-for-compute", "gather-stream", 0.5, "",
       "the all-gather stream made to wait for the compute stream", ""},
      // A host sync before the gather shows with work in flight on the other streams.
      {3, "sync-before-gather", "no-host-sync", -1, "", "the host waits for the device (a synchronize) in all_gather",
       ""},
      {9, "reductions-wait-for-copy-back", "copy-back", 0.8,
       "'reduce_scatter transformer.h.0.flat_grad_shard_device (the next unit's reduction)' on the reduce_scatter "
       "stream",
       "another stream made to wait for the copy back", ""},
      {9, "reductions-wait-for-copy-back", "training-offload", 1, "", "", ""},
      // Only a stream wait counts as waiting: a copy back that merely starts early loses that part alone.
      {9, "copy-back-before-reduction", "copy-back", 0.8, "", "", "another stream made to wait"},
      {9, "compute-waits-for-copy-up", "copy-up-order", -1, "the compute stream made to wait for the copy", "", ""},
      // A copy that waits for a stream whose work it does not read: the other streams are busy before the call.
      {9, "copy-up-waits-for-compute", "copy-up-order", 0.75, "waits for the compute stream's work",
       "66.396 against 63.499 ms", ""},
      {9, "copy-up-waits-for-reductions", "copy-up-order", 0.75, "waits for the reduce_scatter stream's work",
       "the contract is what the copy reads", "66.396"},
      {9, "copy-back-waits-for-gathers", "copy-back", 0.8,
       "waits for 'all_gather transformer.h.0.flat_param_full (a prefetch)'", "the copy up's wait, pasted", ""},
      // The mean made in ops of the task's own, and a gather through a buffer of its own: costs, half the check.
      {8, "sum-then-scale", "replica-stream", 0.5, "'scale' (compute, 0 B) on the reduce_scatter stream",
       "ReduceOp::avg averages inside the collective", ""},
      {5, "gather-into-temporary", "zero-gather", 0.5, "issued 'copy'", "writes the replica in place", ""},
      // end_backward without check_prefetches_used: the grader's stray prefetch races the optimizer step.
      {6, "unused-prefetch-unchecked", "unused-prefetch", 0, "stream race on", "end_backward let it through", ""},
      // Task 6: a compute wait beyond the reference's is read from the op graph, not blamed on after().
      {6, "release-grad-waits-under-async", "step-time", 0, "",
       "the compute stream waited for the reduce_scatter stream 12 times in the measured step's backward, the "
       "reference's 0: release_grad's wait for unit.reduced is SYNC's",
       "after("},
      {6, "release-grad-waits-under-async", "backward-prefetch", -1, "", "release_grad's wait for unit.reduced",
       "after("},
      {6, "end-backward-waits-for-reductions", "step-time", 0, "", "end_backward (or the last release_grad)", "after("},
      {6, "last-use-on-the-gather-stream", "training-async", 0, "", "parked with an event of another stream", ""},
      {8, "compute-waits-for-all-reduce", "replica-stream", 0.5,
       "'the next unit's backward' on the compute stream, issued after the call, waits for the reduction",
       "another stream made to wait for the reduce-scatter stream", ""},
  };
  for (const Expected& e : expected) {
    SCOPED_TRACE(std::string(e.mutant) + " " + std::string(e.check));
    const std::vector<CheckRun> runs =
        run_checks(e.task, find_mutant(e.task, e.mutant).impl(), {std::string(e.check)}, 60);
    ASSERT_EQ(runs.size(), 1u);
    const CheckOutcome& o = runs[0].outcome;
    if (e.fraction < 0) {
      EXPECT_LT(o.fraction, 1);
    } else {
      EXPECT_EQ(o.fraction, e.fraction) << o.got;
    }
    EXPECT_TRUE(contains(o.got, std::string(e.got))) << o.got;
    EXPECT_TRUE(contains(o.cause, std::string(e.cause))) << o.cause;
    if (!e.not_cause.empty()) {
      EXPECT_FALSE(contains(o.cause, std::string(e.not_cause))) << o.cause;
    }
  }
}

// Task 6's memory-released: a buffer parked for good is named by the tag that grows and the method that parks it,
// per mode (half the check each); the budget counts the staging copies' peak too.
TEST(GraderDiagnostics, MemoryAStepLeavesBehindIsNamedByItsTagAndMethod) {
  struct Expected {
    std::string_view mutant;
    double fraction;
    std::string_view got, cause;
  };
  const Expected expected[] = {
      {"parks-staging-under-sync", 0.5, "comm_buffer grew from 1415 MB at the second step's end to 2122 MB",
       "release_staging parked what it frees under SYNC"},
      {"parks-under-sync", 0.5, "param_full grew", "release_full parked what it frees under SYNC"},
      {"never-releases-completed", 0.5, "grad_full grew", "under ASYNC release_completed(device)"},
      {"no-prefetch", 1, "", ""},
  };
  for (const Expected& e : expected) {
    SCOPED_TRACE(std::string(e.mutant));
    const std::vector<CheckRun> runs = run_checks(6, find_mutant(6, e.mutant).impl(), {"memory-released"}, 60);
    ASSERT_EQ(runs.size(), 1u);
    const CheckOutcome& o = runs[0].outcome;
    EXPECT_EQ(o.fraction, e.fraction) << o.got;
    EXPECT_TRUE(contains(o.got, std::string(e.got))) << o.got;
    EXPECT_TRUE(contains(o.cause, std::string(e.cause))) << o.cause;
  }
  RunBudget staging, none;
  staging.peak[static_cast<std::size_t>(MemTag::comm_buffer)] = 2'000'000;
  none.peak[static_cast<std::size_t>(MemTag::comm_buffer)] = 1'000'000;
  const CheckOutcome over = over_budget(staging, none);
  EXPECT_EQ(over.fraction, 0.5);
  EXPECT_TRUE(contains(over.got, "peak comm_buffer 2.00 MB against the reference's 1.00 MB")) << over.got;
  const auto named = [](const std::vector<BudgetLine>& lines, std::string_view what) {
    return std::any_of(lines.begin(), lines.end(), [&](const BudgetLine& l) { return l.what == what; });
  };
  EXPECT_TRUE(named(budget_lines(staging, none), "peak comm_buffer"));
  EXPECT_FALSE(named(budget_lines(RunBudget{}, RunBudget{}), "peak comm_buffer"));  // no staging, no line
}

// A collective only some ranks make hangs the others until the world's timeout: the training's got names where each
// rank waits (the replica group's all-reduce on one side, the loss's on the other), the cause the mistake, not the
// collective a rank happened to time out in.
TEST(GraderDiagnostics, ACollectiveOnlySomeRanksMakeIsNamedAsSuch) {
  const std::vector<CheckRun> runs =
      run_checks(8, find_mutant(8, "one-rank-all-reduces").impl(), {"training-W4-S2-sgd", "replica-mean"}, 60);
  ASSERT_EQ(runs.size(), 2u);
  for (const CheckRun& run : runs) {
    EXPECT_EQ(run.outcome.fraction, 0);
    EXPECT_EQ(run.outcome.cause, kCollectiveHangCause) << run.outcome.got;
  }
  // Whichever rank times out first reports: both meetings are named either way.
  const std::string& got = runs[0].outcome.got;
  EXPECT_TRUE(contains(got, "all_reduce(avg) #1 of 6352 f32 elements of group [")) << got;
  EXPECT_TRUE(contains(got, "all_reduce(avg) #3 of 1 f32 elements of group [0, 1, 2, 3]")) << got;
  EXPECT_TRUE(contains(got, "each waits for the other")) << got;
}

// Tasks 8 and 9: a training the race detector stopped, or that differs, takes its cause from the first of the task's
// direct checks that fails, not one sentence for every mistake; swapped colours are named as swapped in both colour
// checks.
TEST(GraderDiagnostics, ATrainingsCauseIsTheFirstFailingDirectChecks) {
  const std::vector<CheckRun> no_wait =
      run_checks(9, find_mutant(9, "no-host-wait").impl(), {"training-offload-sync"}, 60);
  EXPECT_TRUE(contains(no_wait[0].outcome.got, "the race detector stopped the run")) << no_wait[0].outcome.got;
  EXPECT_TRUE(contains(no_wait[0].outcome.cause, "the host did not wait until `landed`: device.synchronize(landed)"))
      << no_wait[0].outcome.cause;
  const std::vector<CheckRun> sum = run_checks(8, find_mutant(8, "sum-not-mean").impl(), {"training-W6-S3"}, 60);
  EXPECT_TRUE(contains(sum[0].outcome.cause, "ReduceOp::sum instead of avg")) << sum[0].outcome.cause;
  const std::vector<CheckRun> swapped =
      run_checks(8, find_mutant(8, "swapped-colors").impl(), {"shard-groups", "replica-groups"}, 60);
  ASSERT_EQ(swapped.size(), 2u);
  for (const CheckRun& run : swapped)
    EXPECT_TRUE(contains(run.outcome.cause, "shard and replica colours swapped")) << run.outcome.cause;
  // One colour made with the other's formula is told from the two swapped, whichever colour it is.
  const std::vector<CheckRun> shard_like =
      run_checks(8, find_mutant(8, "shard-like-replica").impl(), {"shard-groups"}, 60);
  EXPECT_TRUE(contains(shard_like[0].outcome.cause, "the shard colour made like the replica colour (rank % S)"))
      << shard_like[0].outcome.cause;
  const std::vector<CheckRun> replica_like = run_checks(8, find_mutant(8, "same-color").impl(), {"replica-groups"}, 60);
  EXPECT_TRUE(contains(replica_like[0].outcome.cause, "the replica colour made like the shard colour (rank / S)"))
      << replica_like[0].outcome.cause;
}

// An Error a check's run raised is its diagnostic as it is: the rank named once ("rank 0 failed: stream ...", not
// "rank 0 failed: rank 0: stream ..."), and what stopped it, not a generic "threw".
TEST(GraderDiagnostics, AnErrorTheRunRaisedIsQuotedWithItsRankOnce) {
  const std::vector<CheckRun> runs = run_checks(1, find_mutant(1, "raw-pointer-writes").impl(), {"shard-offsets"}, 60);
  const CheckOutcome& o = runs[0].outcome;
  EXPECT_EQ(runs[0].end, CheckEnd::threw) << o.got;
  EXPECT_TRUE(contains(o.got, "the run stopped with an error: rank 0 failed: a raw pointer into storage 'shard'"))
      << o.got;
  EXPECT_FALSE(contains(o.got, "failed: rank 0:")) << o.got;
  EXPECT_FALSE(contains(o.cause, "threw where")) << o.cause;
  // At its cause, run_world: a reason that names its rank is not prefixed with it again; another's is.
  const auto raised = [](const std::string& reason) {
    return error_of([&] {
      run_world(2, [&](int rank, LocalWorld&) {
        if (rank == 1) throw Error(reason);
      });
    });
  };
  EXPECT_EQ(raised("rank 1: stream compute waits"), "rank 1 failed: stream compute waits");
  EXPECT_EQ(raised("rank 10: elsewhere"), "rank 1 failed: rank 10: elsewhere");
  EXPECT_EQ(raised("disk full"), "rank 1 failed: disk full");
}

// A unit plan's mistake is named by what differs from the reference's plan, in every check whose case shows it: a
// unit the policy names by its module's name() missing is a kind()-only match, not a subtree or a parent; a root
// misnamed is its name (half a check: the units are right), the right units in another order their order.
TEST(GraderDiagnostics, AUnitPlanMistakeIsNamedByWhatDiffers) {
  const std::vector<CheckRun> kind_only =
      run_checks(7, find_mutant(7, "kind-only").impl(), {"nested-units", "wrap-by-name"}, 60);
  for (const CheckRun& run : kind_only) {
    EXPECT_EQ(run.outcome.fraction, 0) << run.outcome.got;
    EXPECT_TRUE(contains(run.outcome.cause,
                         "'transformer.wpe' is no unit though the policy names it: the policy "
                         "matched against kind() only"))
        << run.outcome.cause;
  }
  const std::vector<CheckRun> shared =
      run_checks(7, find_mutant(7, "shared-in-users-unit").impl(), {"nested-units", "wrap-by-name"}, 60);
  for (const CheckRun& run : shared) {
    EXPECT_EQ(run.outcome.fraction, 0) << run.outcome.got;
    EXPECT_TRUE(contains(run.outcome.cause,
                         "unit '(root)' holds transformer.wte.weight twice: a module's "
                         "shared_parameters()"))
        << run.outcome.cause;
  }
  const std::vector<CheckRun> subtree =
      run_checks(7, find_mutant(7, "subtree-parameters").impl(), {"nested-units"}, 60);
  EXPECT_TRUE(
      contains(subtree[0].outcome.cause,
               "a unit took the parameters of modules an inner unit covers (module->parameters(), the whole subtree"))
      << subtree[0].outcome.cause;
  const std::vector<CheckRun> parents = run_checks(7, find_mutant(7, "flat-parents").impl(), {"nested-units"}, 60);
  EXPECT_EQ(parents[0].outcome.cause, "a parent that is not the nearest wrapped ancestor");
  const std::vector<CheckRun> unnamed =
      run_checks(7, find_mutant(7, "root-named-empty").impl(), {"block-units", "nested-units"}, 60);
  for (const CheckRun& run : unnamed) {
    EXPECT_EQ(run.outcome.fraction, 0.5) << run.outcome.got;  // the right units, misnamed
    EXPECT_TRUE(contains(run.outcome.got, "unit 0, module '(root)', is named ''")) << run.outcome.got;
    EXPECT_TRUE(contains(run.outcome.cause, "unit 0 is named '', expected '(root)': a unit takes its module's dotted"))
        << run.outcome.cause;
  }
  const std::vector<CheckRun> by_name = run_checks(7, find_mutant(7, "units-by-name").impl(), {"nested-units"}, 60);
  EXPECT_TRUE(contains(by_name[0].outcome.cause, "the right units in another order: outermost first, in pre-order"))
      << by_name[0].outcome.cause;
  // A training equal to the baseline but over budget names what the plan checks find beside what went over.
  const std::vector<CheckRun> wasteful =
      run_checks(7, find_mutant(7, "subtree-parameters").impl(), {"training-nested-W2"}, 60);
  EXPECT_EQ(wasteful[0].outcome.fraction, 0.5) << wasteful[0].outcome.got;
  EXPECT_TRUE(
      contains(wasteful[0].outcome.cause, "correct but wasteful: ") &&
      contains(wasteful[0].outcome.cause, "; the likely mistake: ") &&
      contains(wasteful[0].outcome.cause,
               "a unit took the parameters of modules an inner unit covers (module->parameters(), the whole subtree"))
      << wasteful[0].outcome.cause;
}

// A plan that checks nothing and gives each wrapped module its whole subtree (module->parameters()): the cases the
// errors check wants an Error for are then not empty (transformer.h holds every Block's parameters), and its cause
// names the plan that is off, as the nested-units check does, rather than "the contract's checks left out".
TEST(GraderDiagnostics, AnErrorsCaseThePlanFilledBlamesThePlanNotTheChecks) {
  class SubtreesUnchecked final : public IntegrationTask {
   public:
    std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
      const auto& unchecked = static_cast<const IntegrationTask&>(find_mutant(7, "no-checks").impl());
      std::vector<UnitPlan> plans = unchecked.plan_units(model, unit_kinds);
      for (UnitPlan& p : plans)
        if (p.module != &model) p.params = p.module->parameters();
      return plans;
    }
  };
  const SubtreesUnchecked graded;
  FsdpTasks tasks = reference_tasks();
  tasks.integration = &graded;
  const FsdpTasks reference = reference_tasks();
  const CheckContext context{.task = 7, .tasks = tasks, .reference = reference, .impl = "student"};
  const CheckOutcome errors = check_named(task_checks(7), "errors").run(context);
  ASSERT_FALSE(errors.passed());
  EXPECT_TRUE(contains(errors.cause, "the plans are off before any check of the contract's can fire")) << errors.cause;
  EXPECT_TRUE(
      contains(errors.cause,
               "a unit took the parameters of modules an inner unit covers (module->parameters(), the whole subtree"))
      << errors.cause;
  // The unchecked plan alone: the checks are what is missing.
  FsdpTasks unchecked_tasks = reference_tasks();
  unchecked_tasks.integration = &static_cast<const IntegrationTask&>(find_mutant(7, "no-checks").impl());
  const CheckContext unchecked{.task = 7, .tasks = unchecked_tasks, .reference = reference, .impl = "mutant:no-checks"};
  EXPECT_TRUE(contains(check_named(task_checks(7), "errors").run(unchecked).cause, "the contract's checks left out"));
}

// Each task 7 plan check's "see it" command opens the model and policy the check plans.
TEST(GraderDiagnostics, EachUnitPlanCheckShowsItsOwnCase) {
  const std::vector<Check> checks = task_checks(7);
  const auto shown = [&](const std::string& id) { return show_command(check_named(checks, id), "student"); };
  EXPECT_EQ(shown("block-units"),
            "build/app/fsdplab gui --model gpt2 --preset test-tiny --world 2 --wrap block --impl 7=student "
            "--compare impl --break pre-forward");
  EXPECT_TRUE(contains(shown("nested-units"), "--model gpt2 --preset test-tiny --world 2 --wrap nested "))
      << shown("nested-units");
  EXPECT_TRUE(contains(shown("wrap-by-name"), "--model gpt2 --preset test-tiny --world 2 --wrap linear "))
      << shown("wrap-by-name");
  EXPECT_TRUE(contains(shown("no-empty-root"), "--model toy --world 2 --wrap block ")) << shown("no-empty-root");
}

// A check over several cases shows the one that failed: reshard-policy's dry run under the strategy the mutant got
// wrong (grad_op), where its own command, under full, would show the reference's gathers.
TEST(GraderDiagnostics, ASeeItCommandShowsTheCaseThatFailed) {
  const GradeReport report = grade_task("3=mutant:ignores-strategy", 3);
  const GradedCheck* policy = nullptr;
  for (const GradedCheck& g : report.tasks.at(0).checks)
    if (g.check.id == "reshard-policy") policy = &g;
  ASSERT_NE(policy, nullptr);
  EXPECT_LT(policy->earned, policy->check.points);
  EXPECT_EQ(policy->show,
            "build/app/fsdplab run --model gpt2 --preset gpt2 --world 4 --steps 2 --dry-run --strategy grad_op "
            "--impl 3=mutant:ignores-strategy");
  // A check an error stopped shows the run going to that error: a break would stop it first, or never come (the
  // ranks of a collective only some ranks make wait for a rank stopped at it).
  const GradeReport hang = grade_task("8=mutant:one-rank-all-reduces", 8);
  int stopped = 0;
  for (const GradedCheck& g : hang.tasks.at(0).checks) {
    if (g.run.end != CheckEnd::threw) continue;
    ++stopped;
    EXPECT_FALSE(contains(g.show, "--break")) << g.check.id << ": " << g.show;
  }
  EXPECT_GT(stopped, 0);
}

// Task 2's checks lay out small parameters of their own; the dashboard's map, gpt2 test-small. A padding off by one
// changes no unit of it at W = 3, so a failed check's command goes to the first world at which the graded layout of
// one differs (the map names it there: MappedUnit::differs); a mistake no unit of that model shows (alignment: its
// sizes are all multiples of the default align) goes to the toy model, whose layer norm's are not.
TEST(GraderDiagnostics, ATask2SeeItGoesToAWorldWhereTheMapShowsTheDifference) {
  const GradeReport padding = grade_task("2=mutant:padding-off-by-one", 2);
  int failed = 0;
  for (const GradedCheck& g : padding.tasks.at(0).checks) {
    if (g.earned >= g.check.points || g.check.id == "training-W3") continue;
    ++failed;
    EXPECT_EQ(g.show,
              "build/app/fsdplab gui --model gpt2 --preset test-small --world 2 --impl 2=mutant:padding-off-by-one "
              "--compare impl")
        << g.check.id;
  }
  EXPECT_GT(failed, 0);
  const GradeReport alignment = grade_task("2=mutant:no-alignment", 2);
  for (const GradedCheck& g : alignment.tasks.at(0).checks) {
    if (g.check.id != "alignment") continue;
    EXPECT_LT(g.earned, g.check.points);
    EXPECT_EQ(g.show, "build/app/fsdplab gui --model toy --world 2 --impl 2=mutant:no-alignment --compare impl");
  }
}

// A check the race detector failed shows the run going to its race (the timeline marks it there): a --break would
// stop it at the task's first event, before anything is wrong.
TEST(GraderDiagnostics, ARaceIsShownWithoutTheBreakThatWouldStopBeforeIt) {
  const GradeReport report = grade_task("3=mutant:missing-wait", 3);
  int races = 0;
  for (const GradedCheck& g : report.tasks.at(0).checks) {
    if (!g.run.outcome.raced) {
      if (g.check.id == "gather-stream") {  // passed: its command keeps its break
        EXPECT_TRUE(contains(g.show, " --break task:3")) << g.show;
      }
      continue;
    }
    ++races;
    EXPECT_FALSE(contains(g.show, "--break")) << g.check.id << ": " << g.show;
    EXPECT_TRUE(contains(g.show, "--impl 3=mutant:missing-wait")) << g.show;
  }
  EXPECT_GT(races, 0);
}

// Task 5's gather schedule: gathers racing the update show in a training (the race detector stops it there); a missing
// wait for the gathers and a host wait do not (the trainer's end-of-step host sync hides them), so their outcome gives
// no command, where the check's own drew the reference's picture.
TEST(GraderDiagnostics, AGatherScheduleNoTrainingShowsHasNoCommand) {
  const auto gather_schedule = [](const std::string& impl) {
    const GradeReport report = grade_task(impl, 5);
    for (const GradedCheck& g : report.tasks.at(0).checks)
      if (g.check.id == "gather-schedule") return g;
    ADD_FAILURE() << "no gather-schedule check";
    return GradedCheck{};
  };
  for (const std::string unseen : {"5=mutant:compute-no-wait", "5=mutant:gather-host-sync"}) {
    const GradedCheck g = gather_schedule(unseen);
    EXPECT_LT(g.earned, g.check.points) << unseen;
    EXPECT_TRUE(g.run.outcome.unseen) << unseen;
    EXPECT_EQ(g.show, "") << unseen;
  }
  const GradedCheck race = gather_schedule("5=mutant:gather-before-update");
  EXPECT_LT(race.earned, race.check.points);
  EXPECT_TRUE(contains(race.show, "--impl 5=mutant:gather-before-update")) << race.show;
}

// The grader's own test (`fsdplab grade --mutants`, the same call; the test grader.mutants_command runs the command
// for task 3): every mutant of the catalogue, graded in its task with the course's example held-out case beside the
// checks, loses points.
// And a race is told by the outcome's flag, never by its words: whatever the race detector stopped (a training, a
// direct check's op, the check itself), every mutant's check that quotes its report is flagged, and no other is.
// Grading every mutant takes minutes, so this is one test, not two, which grades a check per core as the command
// does; the sanitizer presets leave it out.
TEST(GraderMutants, EveryMutantIsCaughtAndEveryRaceFlagged) {
  const IsolationLimits per_core{.parallel = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
  const MutantsReport report = grade_mutants({}, load_cases(FSDPLAB_SOURCE_DIR "/grader/cases/example"), 0, per_core);
  ASSERT_EQ(report.mutants.size(), mutant_catalog().size());
  std::set<std::string> raced;
  for (const MutantGrade& m : report.mutants) {
    const std::string mutant = std::to_string(m.mutant.task) + "=mutant:" + std::string(m.mutant.name);
    EXPECT_TRUE(m.caught()) << mutant << " kept all " << m.grade.possible() << " points";
    for (const GradedCheck& g : m.grade.checks) {
      const std::string name = mutant + " " + g.check.id;
      EXPECT_EQ(g.run.outcome.raced, contains(g.run.outcome.got, "stream race on "))
          << name << ": " << g.run.outcome.got;
      if (g.run.outcome.raced) raced.insert(name);
    }
  }
  EXPECT_EQ(report.caught(), static_cast<int>(report.mutants.size()));
  // Races found by a training, by a direct check's op (task 4's zeroing), by a schedule's run, in a pool.
  for (const char* expected : {"3=mutant:missing-wait training", "4=mutant:zero-on-reduce-stream zero-gradient",
                               "6=mutant:free-at-host-time step-time", "6=mutant:pool-without-free-event pool"})
    EXPECT_TRUE(raced.contains(expected)) << expected;
}

// Every "see it" command calls fsdplab by a path that runs it from the repository's root, as the READMEs do.
TEST(GraderDiagnostics, SeeItCommandsCallFsdplabByItsPath) {
  const std::vector<Check> checks = task_checks(2);
  const Check& padding = check_named(checks, "padding");
  EXPECT_EQ(show_command(padding, "student"),
            "build/app/fsdplab gui --model gpt2 --world 3 --impl 2=student --compare impl");
  EXPECT_EQ(show_command(padding, "mutant:padding-off-by-one", "build-asan/app/fsdplab"),
            "build-asan/app/fsdplab gui --model gpt2 --world 3 --impl 2=mutant:padding-off-by-one --compare impl");
  // The reference graded: nothing else to set beside it (the dashboard refuses --compare impl then).
  EXPECT_EQ(show_command(padding, "reference"), "build/app/fsdplab gui --model gpt2 --world 3 --impl 2=reference");
  // Views that copy show in a run (NaN, or the race detector's stop); the map draws only layouts.
  EXPECT_EQ(show_command(check_named(checks, "views"), "student"),
            "build/app/fsdplab run --model gpt2 --world 2 --steps 2 --impl 2=student");
  // The errors a task raises on bad input: no run gives a task that input, so there is no command.
  EXPECT_EQ(show_command(check_named(checks, "bad-input"), "student"), "");
  EXPECT_EQ(GradeRequest{}.program, "build/app/fsdplab");
  // The commands a diagnostic quotes, too: only where a command begins, never inside a path or a word.
  EXPECT_EQ(with_program("W = 2: 4.16 (yours: fsdplab run --world 2; the baseline: fsdplab run --world 1)",
                         "build/app/fsdplab"),
            "W = 2: 4.16 (yours: build/app/fsdplab run --world 2; the baseline: build/app/fsdplab run --world 1)");
  EXPECT_EQ(with_program("`fsdplab gui --x` and /opt/fsdplab run here", "b/fsdplab"),
            "`b/fsdplab gui --x` and /opt/fsdplab run here");
  // Graded: a training's figures with both commands, runnable as printed.
  const GradeReport report = grade_task("4=mutant:sum-not-mean", 4);
  int trainings = 0;
  for (const GradedCheck& g : report.tasks.at(0).checks) {
    if (g.check.id != "sgd-training") continue;
    ++trainings;
    EXPECT_TRUE(contains(g.run.outcome.got, "(yours: build/app/fsdplab run --model gpt2 ")) << g.run.outcome.got;
    EXPECT_TRUE(contains(g.run.outcome.got,
                         "; the baseline: build/app/fsdplab run --model gpt2 --preset test-tiny "
                         "--world 1 --batch 24 --seq 16 --steps 3 --seed 0 --optimizer sgd --lr 0.1)"))
        << g.run.outcome.got;
  }
  EXPECT_EQ(trainings, 1);
}

// And the same diagnostics: never-records fails on both ranks at once, and the rank its diagnostic names must
// not depend on which thread got there first ([Note: which failure a world reports]).
TEST(Grader, TheSameCodeGetsTheSamePointsOnEveryRun) {
  GradeRequest request;
  request.impl = parse_impl("2=mutant:wrong-rank-slices,3=mutant:never-records,6=mutant:no-prefetch");
  request.tasks = {2, 3, 6};
  request.limits.parallel = 2;
  const GradeReport first = grade(request), second = grade(request);
  ASSERT_EQ(first.tasks.size(), second.tasks.size());
  for (std::size_t t = 0; t < first.tasks.size(); ++t) {
    EXPECT_LT(first.tasks[t].earned(), first.tasks[t].possible());  // a mutant loses points
    ASSERT_EQ(first.tasks[t].checks.size(), second.tasks[t].checks.size());
    for (std::size_t c = 0; c < first.tasks[t].checks.size(); ++c) {
      const GradedCheck &a = first.tasks[t].checks[c], &b = second.tasks[t].checks[c];
      EXPECT_EQ(a.earned, b.earned) << a.check.id;
      EXPECT_EQ(a.run.outcome.got, b.run.outcome.got) << a.check.id;
    }
  }
}

TEST(Grader, EveryTaskHasChecksOfItsOwnAndAtLeastThreeMutants) {
  for (int task = 1; task <= kTaskCount; ++task) {
    const std::vector<Check> checks = task_checks(task);
    EXPECT_GE(checks.size(), 4u) << "task " << task;
    std::set<std::string> ids;
    for (const Check& c : checks) {
      EXPECT_EQ(c.task, task) << c.id;
      EXPECT_TRUE(ids.insert(c.id).second) << "task " << task << " has two checks '" << c.id << "'";
      EXPECT_GT(c.points, 0) << c.id;
      // A command shows the graded implementation, or there is none: the errors a task raises on bad input, and
      // task 1's host order and drawing, which leave the same parameters.
      const std::set<std::string> unseen = {"bad-input", "errors", "host-waits", "shard-only"};
      EXPECT_TRUE(contains(c.show, "{impl}") || (c.show.empty() && unseen.contains(c.id))) << c.id << ": " << c.show;
    }
    int mutants = 0;
    for (const Mutant& m : mutant_catalog()) mutants += m.task == task;
    EXPECT_GE(mutants, 3) << "task " << task;
  }
  EXPECT_TRUE(contains(error_of([] { find_mutant(3, "nope"); }),
                       "task 3 (ForwardTask) has no mutant 'nope'; expected one of:"));
}

// A task whose every check stopped at its TODO is one line of text, not the same TODO under each check; a task with
// one check that ran is printed whole.
TEST(GradeReport, ATaskStillAtItsTodoIsOneLine) {
  const auto todo = [](const std::string& id) {
    GradedCheck g;
    g.check.task = 5;
    g.check.id = id;
    g.check.points = 2;
    g.run.outcome =
        CheckOutcome::fail("the check to run to its end", "a TODO is left: task 5, make: not implemented", kTodoLeft);
    return g;
  };
  GradeReport report;
  report.tasks.push_back({5, "student", "labs/05-sharded-optimizer/student.cpp:16", {todo("a"), todo("b")}});
  std::ostringstream text;
  print_grade(text, report);
  EXPECT_TRUE(contains(text.str(), "    TODO LEFT  all 2 checks stopped at it: task 5, make: not implemented\n"))
      << text.str();
  EXPECT_FALSE(contains(text.str(), "LOST")) << text.str();

  report.tasks[0].checks[1].run.outcome.cause = "the shard stepped twice";
  std::ostringstream whole;
  print_grade(whole, report);
  EXPECT_FALSE(contains(whole.str(), "TODO LEFT")) << whole.str();
  EXPECT_TRUE(contains(whole.str(), "    LOST  b ")) << whole.str();
}

// One mistake that fails several checks of a task is told once: a later check with the same got (or cause) points at
// the first, and a cause equal to some got is still printed. The JSON keeps every text.
TEST(GradeReport, ADiagnosticSeveralChecksShareIsToldOnce) {
  const auto lost = [](const std::string& id, const std::string& got, const std::string& cause) {
    GradedCheck g;
    g.check.task = 6;
    g.check.id = id;
    g.check.points = 2;
    g.run.outcome = CheckOutcome::fail("as the reference", got, cause);
    return g;
  };
  GradeReport report;
  report.tasks.push_back({6,
                          "student",
                          "labs/06-prefetch-overlap/student.cpp:1",
                          {lost("first", "a race", "a wait missing"), lost("second", "a race", "a wait missing"),
                           lost("third", "a wait missing", "a race")}});
  std::ostringstream text;
  print_grade(text, report);
  const std::string t = text.str();
  EXPECT_TRUE(contains(t, "LOST  second")) << t;
  EXPECT_TRUE(contains(t, "          got       as first's above\n          cause     as first's above\n")) << t;
  EXPECT_TRUE(contains(t, "          got       a wait missing\n          cause     a race\n")) << t;  // third's own
  const std::filesystem::path json = std::filesystem::path(::testing::TempDir()) / "told_once.json";
  write_grade_json(json, report);
  std::ifstream in(json);
  const nlohmann::json read = nlohmann::json::parse(in);
  EXPECT_EQ(read["tasks"][0]["checks"][1]["got"], "a race");
  EXPECT_EQ(read["tasks"][0]["checks"][1]["cause"], "a wait missing");
}

// A budget prints a figure beside the reference's with the decimals that tell them apart, in its line as in the
// diagnostic's got (a TA read "bytes moved 1.09 MB (reference 1.09)" under a half point lost to 1.094 against 1.090).
TEST(GradeReport, ABudgetFigureIsPrintedApartFromTheReferences) {
  const FiguresApart apart = figures_apart(1.094, 1.0904);
  EXPECT_EQ(apart.graded, "1.094");
  EXPECT_EQ(apart.reference, "1.090");
  const FiguresApart equal = figures_apart(2672.05, 2672.05);
  EXPECT_EQ(equal.graded, "2672.05");
  EXPECT_EQ(equal.reference, "2672.05");
}

// A submission's grade is written by the process that runs the student's code, so the course's fsdplab reads it back
// through unsound_grade_json: a real grade is sound; one missing a task or a check, one whose sums do not add up, and
// one that is not a grade are not.
TEST(GradeReport, AGradeThatIsNotWhatTheGraderWritesIsUnsound) {
  const GradeReport report = grade_task("2=mutant:padding-off-by-one", 2);
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) / "sound.json";
  write_grade_json(path, report);
  std::ifstream in(path);
  const nlohmann::json real = nlohmann::json::parse(in);
  EXPECT_EQ(unsound_grade_json(real.dump(), {2}), "");
  EXPECT_EQ(unsound_grade_json(real.dump(), {}), "it holds 1 tasks, not 9");
  EXPECT_EQ(unsound_grade_json(R"({"graded": true, "points": 124, "max": 124, "tasks": []})", {2}),
            "it holds 0 tasks, not 1");
  EXPECT_EQ(unsound_grade_json("total: 13/13", {2}), "it is not JSON");
  EXPECT_EQ(unsound_grade_json(R"({"graded": false})", {2}), "it does not say graded");
  nlohmann::json inflated = real;
  inflated["points"] = real["max"];
  EXPECT_EQ(unsound_grade_json(inflated.dump(), {2}), "its points are not the sum of its tasks'");
  nlohmann::json full_marks = real;  // every check at its max, the sums left as they were
  for (nlohmann::json& c : full_marks["tasks"][0]["checks"]) c["points"] = c["max"];
  EXPECT_EQ(unsound_grade_json(full_marks.dump(), {2}), "task 2's points are not the sum of its checks'");
  nlohmann::json over = real;
  over["tasks"][0]["checks"][0]["points"] = 1000;
  EXPECT_EQ(unsound_grade_json(over.dump(), {2}), "task 2 has a check whose points are not 0 to its max");
  nlohmann::json dropped = real;
  const std::string first = real["tasks"][0]["checks"][0]["check"];
  dropped["tasks"][0]["checks"].erase(0);
  EXPECT_TRUE(contains(unsound_grade_json(dropped.dump(), {2}), "task 2's check " + first + " is missing"));
}

// A rate limiter that declines a prefetch before the host waited for the oldest parked unit: the rate-limiter check
// takes it, and the overlap checks name it instead of after(), which is right (a student's lab 06 was told after()).
TEST(GraderDiagnostics, APrefetchDeclinedWithoutWaitingIsNamedAsSuch) {
  const GradeReport report = grade_task("6=mutant:declines-without-waiting", 6);
  std::set<std::string> lost;
  for (const GradedCheck& g : report.tasks.at(0).checks) {
    if (g.earned >= g.check.points) continue;
    lost.insert(g.check.id);
    // A training that passed over its budget (more memory held at a peak) says so, and names no method either.
    if (!contains(g.run.outcome.cause, "correct but wasteful")) {
      EXPECT_TRUE(contains(g.run.outcome.cause, "acquire_full declined")) << g.check.id << ": " << g.run.outcome.cause;
    }
    EXPECT_FALSE(contains(g.run.outcome.cause, "after(pre_")) << g.check.id << ": " << g.run.outcome.cause;
  }
  EXPECT_TRUE(lost.count("rate-limiter")) << "the limiter's own check passed";
  EXPECT_TRUE(lost.count("backward-prefetch"));
}

// The text prints a grade's points to the hundredth the JSON carries: a gradebook and a student see one number.
TEST(GradeReport, TheTextShowsThePointsTheJsonCarries) {
  const auto graded = [](int points, double earned) {
    GradedCheck g;
    g.check.task = 1;
    g.check.points = points;
    g.earned = earned;
    return g;
  };
  GradeReport report;
  report.tasks.push_back({1, "student", "labs/01-meta-init/student.cpp:1", {graded(108, 93.16), graded(13, 13)}});
  std::ostringstream text;
  print_grade(text, report);
  EXPECT_TRUE(contains(text.str(), "total: 106.16/121 points")) << text.str();
  EXPECT_TRUE(contains(text.str(), " 93.16/108\n")) << text.str();
  EXPECT_TRUE(contains(text.str(), " 13/13\n")) << text.str();
}

// `sha256sum FILE`'s hash, "" when it could not run.
std::string sha256sum(const std::filesystem::path& file) {
  const std::string command = "sha256sum '" + file.string() + "'";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  char hash[65] = {};
  const bool read = std::fscanf(pipe, "%64s", hash) == 1;
  return pclose(pipe) == 0 && read ? hash : "";
}

// What a gradebook needs beside the points: the commit of the fsdplab that graded, the public checks' and the held-out
// cases' points apart (in all and per task), and the SHA-256 of each student file graded, as compiled into this build
// (here the tree's own lab skeletons) and as `sha256sum` prints it; none for a lab not built, nor for a reference.
TEST(GradeReport, TheJsonRecordsTheCommitTheFilesGradedAndTheHeldOutPointsApart) {
  const auto graded = [](const std::string& id, int points, double earned) {
    GradedCheck g;
    g.check.task = 3;
    g.check.id = id;
    g.check.points = points;
    g.earned = earned;
    return g;
  };
  GradeReport report;
  report.fsdplab_commit = "0123abc-dirty";
  report.tasks.push_back({3,
                          "student",
                          "labs/03-forward/student.cpp:1",
                          {graded("reshard", 4, 4), graded("case:W5 grad_op", 2, 0.5), graded("gather", 3, 1.25)}});
  report.tasks.push_back({4, "student", "not built", {graded("grad", 5, 0)},
                          NotRun{CheckEnd::not_built, "labs/04-backward/student.cpp: missing"}});
  report.tasks.push_back({5, "reference", "engine/fsdp/sharded_optimizer_reference.cpp:1", {graded("step", 2, 2)}});
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) / "gradebook.json";
  write_grade_json(path, report);
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["fsdplab_commit"], "0123abc-dirty");
  EXPECT_EQ(j["points"], 7.75);
  EXPECT_EQ(j["built_in"]["points"], 7.25);
  EXPECT_EQ(j["built_in"]["max"], 14);
  EXPECT_EQ(j["held_out_cases"]["points"], 0.5);
  EXPECT_EQ(j["held_out_cases"]["max"], 2);
  EXPECT_EQ(j["tasks"][0]["held_out_cases"]["max"], 2);
  EXPECT_EQ(j["tasks"][1]["held_out_cases"]["max"], 0);
  const std::string skeleton = sha256sum(FSDPLAB_SOURCE_DIR "/labs/03-forward/student.cpp");
  ASSERT_EQ(skeleton.size(), 64u) << "sha256sum did not run";
  EXPECT_EQ(j["tasks"][0]["sha256"], skeleton);
  EXPECT_FALSE(j["tasks"][1].contains("sha256")) << "a lab not built was graded as its skeleton";
  EXPECT_EQ(j["tasks"][1]["not_built"], "labs/04-backward/student.cpp: missing");
  EXPECT_FALSE(j["tasks"][1].contains("uses_reference"));
  EXPECT_FALSE(j["tasks"][2].contains("sha256")) << "a reference is no student's file";
  EXPECT_NE(student_file_sha256(4), student_file_sha256(3)) << "each lab's own file";
  EXPECT_EQ(student_file_sha256(10), "");
}

// The checks read the program's stream waits from the op graph. A block the caching allocator hands from the
// all-gather stream to the compute stream makes compute wait for its free, as on a GPU, but the program never asked
// for that wait: it is not counted, and an event wait of the program's own is.
TEST(GraderOpGraph, TheAllocatorsWaitIsNotTheProgramsWait) {
  const auto device = make_graded_device(0);
  auto gathered = std::make_shared<Storage>(*device, 4096, MemTag::param_full, "unit 0 full", Storage::Start::allocated,
                                            Lane::all_gather);
  OpSpec gather;
  gather.name = "all_gather unit 0";
  gather.duration = 1'000'000;
  gather.writes = {gathered->access(0, 4096)};
  const OpId gather_id = device->launch(Lane::all_gather, std::move(gather), {});
  const BlockId block = gathered->access(0, 4096).block;
  gathered->free();
  const Tensor activations = Tensor::empty(*device, {1024}, DType::f32, MemTag::activation, "activations");
  ASSERT_EQ(activations.access().block, block) << "the allocator hands the freed block to the compute stream";
  OpSpec write;
  write.name = "write activations";
  write.duration = 1'000;
  write.writes = {activations.access()};
  const OpRecord written = device->op(device->launch(Lane::compute, std::move(write), {}));
  ASSERT_EQ(written.deps.size(), 1u);
  EXPECT_EQ(written.deps[0].op, gather_id);
  EXPECT_GE(written.begin, device->op(gather_id).end) << "the compute stream waited for the free";
  EXPECT_FALSE(waited_for(written, gather_id));
  EXPECT_TRUE(lanes_waited_for(written, {device->op(gather_id)}).empty());

  Event done("gathered");
  device->record(done, Lane::all_gather);
  device->wait(Lane::compute, done);
  const OpRecord probe = busy_op(*device, Lane::compute, OpCategory::compute, "probe", 1'000);
  EXPECT_TRUE(waited_for(probe, gather_id));
  device->synchronize();
}

class GraderCases : public testing::TempDirTest {};

TEST_F(GraderCases, AHeldOutCaseIsGradedWithItsTask) {
  const std::vector<Check> cases = load_cases(FSDPLAB_SOURCE_DIR "/grader/cases/example");
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_EQ(cases[0].task, 3);
  EXPECT_EQ(cases[0].id, "case:W5 grad_op");
  EXPECT_TRUE(cases[0].is_held_out_case());
  EXPECT_EQ(cases[0].points, 2);
  EXPECT_TRUE(contains(cases[0].show, "--world 5")) << cases[0].show;
  EXPECT_TRUE(contains(cases[0].show, "--strategy grad_op")) << cases[0].show;
  GradeRequest request;
  request.impl = parse_impl("reference");
  request.tasks = {3};
  request.extra = cases;
  const GradeReport report = grade(request);
  const GradedCheck& held_out = report.tasks.at(0).checks.back();
  EXPECT_EQ(held_out.check.id, "case:W5 grad_op");
  EXPECT_EQ(held_out.earned, 2) << held_out.run.outcome.got;
}

// A case whose settings no training survives (the learning rate diverges) is named as the case's fault, not the
// graded code's: the reference loses its points too, which `grade --impl reference --cases` shows the course.
TEST_F(GraderCases, ACaseTheReferenceCannotTrainBlamesTheCase) {
  std::filesystem::create_directories(path("cases"));
  std::ofstream(path("cases/diverges.json")) << R"({"name": "diverges", "task": 3, "lr": 1e20})";
  GradeRequest request;
  request.impl = parse_impl("reference");
  request.tasks = {3};
  request.extra = load_cases(path("cases"));
  const GradeReport report = grade(request);
  const GradedCheck& held_out = report.tasks.at(0).checks.back();
  ASSERT_EQ(held_out.check.id, "case:diverges");
  EXPECT_EQ(held_out.earned, 0);
  EXPECT_TRUE(contains(held_out.run.outcome.got, "the check's case cannot be trained: the single-rank baseline of "))
      << held_out.run.outcome.got;
  EXPECT_TRUE(contains(held_out.run.outcome.cause, "the case, not the graded code")) << held_out.run.outcome.cause;
}

// A held-out case the race detector stopped (task 3 without its event wait) says it was a race, not the numbers.
TEST_F(GraderCases, AHeldOutCaseStoppedByARaceNamesTheRace) {
  const std::vector<Check> cases = load_cases(FSDPLAB_SOURCE_DIR "/grader/cases/example");
  ASSERT_EQ(cases.size(), 1u);
  FsdpTasks tasks = reference_tasks();
  tasks.set(3, find_mutant(3, "missing-wait").impl());
  const std::vector<CheckJob> jobs = {{&cases[0], tasks, "student", 0}};
  const std::vector<CheckRun> runs = run_isolated(jobs, {60, 2});
  ASSERT_EQ(runs.size(), 1u);
  const CheckOutcome& outcome = runs[0].outcome;
  EXPECT_FALSE(outcome.passed());
  EXPECT_TRUE(outcome.raced) << outcome.got;
  EXPECT_TRUE(contains(outcome.cause, "no event orders the second after the first")) << outcome.cause;
}

TEST_F(GraderCases, AMalformedCaseIsRefusedByName) {
  const auto refusal = [&](const std::string& json) {
    std::filesystem::remove_all(path("cases"));
    std::filesystem::create_directories(path("cases"));
    std::ofstream(path("cases/one.json")) << json;
    return error_of([&] { load_cases(path("cases")); });
  };
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "wrold": 4})"), "one.json: unknown key 'wrold'"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "world": 2, "world": 3})"),
                       "one.json: not valid JSON (it has the key \"world\" twice in one object"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x"})"), "a case needs a \"name\" and a \"task\""));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 12})"), "\"task\" is 12; expected 1 to 9"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "world": "two"})"), "'world' is \"two\""));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 8, "strategy": "hybrid", "world": 4, "hybrid_group": 3})"),
                       "one.json: \"hybrid_group\" 3 does not divide \"world\" 4"));
  // A configuration no run could train is refused here, not charged to the student as points the reference loses.
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "world": 2, "batch": 7})"),
                       "one.json: \"batch\" 7 is not a multiple of \"world\" 2"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "preset": "nope"})"),
                       "one.json: \"preset\": unknown gpt2 preset 'nope'"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "model": "resnet"})"), "resnet"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "world": 100, "batch": 100})"),
                       "one.json: \"world\" is 100; expected 1 to 16 ranks"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "optimizer": "lion"})"),
                       "one.json: unknown optimizer 'lion'; expected sgd or adamw"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "lr": -5})"),
                       "one.json: \"lr\" -5; expected a finite learning rate >= 0"));
  EXPECT_TRUE(
      contains(refusal(R"({"name": "x", "task": 3, "steps": 0})"), "one.json: \"steps\" is 0; expected 1 to 100"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "steps": 100000000})"), "\"steps\" is 100000000; expected"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "seq": 0})"), "one.json: \"seq\" is 0; expected >= 1"));
  // A tolerance near 1 passes wrong code: a typo, refused (a TA's 100000 passed a gradient W times too large).
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 4, "tolerance": 100000})"),
                       "one.json: \"tolerance\" is 100000; expected above 0 and below 0.1"));
  // A whole-number key is not truncated from a fraction, nor wrapped from a number too big for it.
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "points": 2.7})"), "'points' is 2.7; expected a whole"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3.9})"), "'task' is 3.9; expected a whole number"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "batch": 1e12})"), "'batch' is"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "world": 4294967298})"), "'world' is 4294967298"));
  // A value of the wrong kind is named once, with the kind expected; SYNC with a prefetch is refused as run refuses it.
  const std::string offload = refusal(R"({"name": "x", "task": 3, "offload": "yes"})");
  EXPECT_TRUE(contains(offload, "one.json: 'offload' is \"yes\"; expected true or false")) << offload;
  EXPECT_EQ(offload.find("one.json"), offload.rfind("one.json")) << offload;
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 6, "mode": "sync", "prefetch": "forward"})"),
                       "\"prefetch\" is \"forward\" with \"mode\": \"sync\"; SYNC never prefetches"));
  std::filesystem::remove_all(path("cases"));
  std::filesystem::create_directories(path("cases"));
  std::ofstream(path("cases/sync.json")) << R"({"name": "x", "task": 6, "mode": "sync"})";
  EXPECT_EQ(load_cases(path("cases")).size(), 1u) << "SYNC without a prefetch key: SYNC's none";
  // A case where its task never runs would give the untouched skeleton its points (a TA's case of task 8 did).
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 8, "world": 4, "strategy": "full"})"),
                       "one.json: a task 8 case with \"strategy\": \"full\", \"hybrid_group\" 0 and \"world\" 4 "
                       "never calls task 8"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 8, "world": 4, "strategy": "hybrid", "hybrid_group": 4})"),
                       "never calls task 8"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 9, "world": 2})"),
                       "one.json: a task 9 case without \"offload\": true never calls task 9"));
  // A case's name is its check id (case:NAME): never empty, never another case's.
  EXPECT_TRUE(contains(refusal(R"({"name": "", "task": 3})"), "one.json: \"name\" is empty"));
  std::ofstream(path("cases/one.json")) << R"({"name": "x", "task": 3})";
  std::ofstream(path("cases/two.json")) << R"({"name": "x", "task": 4})";
  const std::string twice = error_of([&] { load_cases(path("cases")); });
  EXPECT_TRUE(contains(twice, path("cases/one.json").string() + " and " + path("cases/two.json").string() +
                                  " are both named 'x'"))
      << twice;
  std::filesystem::remove(path("cases/two.json"));
  EXPECT_TRUE(contains(refusal("{nope"), "not valid JSON"));
  // Nesting that would overflow a stack is refused as it is read, and a value is quoted short.
  const std::string deep = refusal(R"({"name": "x", "task": 3, "seq": )" + std::string(100000, '[') + "}");
  EXPECT_TRUE(contains(deep, "one.json: not valid JSON (it nests arrays and objects 65 deep")) << deep;
  const std::string long_value = refusal(R"({"name": "x", "task": 3, "seq": ")" + std::string(1000, '7') + "\"}");
  EXPECT_TRUE(contains(long_value, "'seq' is \"777")) << long_value;
  EXPECT_LT(long_value.size(), 300u) << long_value;
  // toy and mlp have no named sizes: their cases need no preset, and mlp's size is its own two keys.
  std::filesystem::remove(path("cases/one.json"));
  std::ofstream(path("cases/toy.json")) << R"({"name": "toy", "task": 3, "model": "toy", "world": 2})";
  std::ofstream(path("cases/mlp.json"))
      << R"({"name": "mlp", "task": 4, "model": "mlp", "mlp_width": 32, "mlp_depth": 2, "world": 2})";
  EXPECT_EQ(load_cases(path("cases")).size(), 2u);
  // A case named in capitals is graded, never skipped.
  std::ofstream(path("cases/LOUD.JSON")) << R"({"name": "loud", "task": 3, "model": "toy", "world": 3})";
  EXPECT_EQ(load_cases(path("cases")).size(), 3u);
  std::filesystem::remove(path("cases/LOUD.JSON"));
  std::filesystem::remove(path("cases/mlp.json"));
  std::filesystem::remove(path("cases/toy.json"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "model": "mlp", "mlp_width": 0})"),
                       "one.json: \"mlp_width\" 0 and \"mlp_depth\" 4; expected 1 to 65536"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "model": "toy", "preset": "gpt2"})"),
                       "only gpt2 and llama have named sizes"));
  EXPECT_TRUE(contains(refusal(R"({"name": "x", "task": 3, "model": "toy", "seq": 8})"),
                       "one.json: \"seq\" 8 for \"model\" toy: only gpt2 and llama read sequences of tokens"));
  std::filesystem::remove(path("cases/one.json"));
  EXPECT_TRUE(contains(error_of([&] { load_cases(path("cases")); }), "holds no *.json case"));
  EXPECT_TRUE(contains(error_of([&] { load_cases(path("missing")); }),
                       "'" + path("missing").string() + "': no such folder; expected a folder"));
  std::ofstream(path("a.json")) << "{}";
  EXPECT_TRUE(contains(error_of([&] { load_cases(path("a.json")); }), "is not a folder; expected a folder"));
  // A *.json that is not a file is named, never skipped (a loop of links had leaked a filesystem_error).
  std::filesystem::create_directories(path("cases/sub.json"));
  EXPECT_TRUE(contains(error_of([&] { load_cases(path("cases")); }),
                       "'" + path("cases/sub.json").string() + "' is not a case file (a folder)"));
  std::filesystem::remove(path("cases/sub.json"));
  std::filesystem::create_symlink("b.json", path("cases/a.json"));
  std::filesystem::create_symlink("a.json", path("cases/b.json"));
  const std::string loop = error_of([&] { load_cases(path("cases")); });
  EXPECT_TRUE(contains(loop, "'" + path("cases/a.json").string() +
                                 "' is not a case file (Too many levels of "
                                 "symbolic links); expected every *.json in the folder to be a case"))
      << loop;
}

}  // namespace
}  // namespace fsdplab
