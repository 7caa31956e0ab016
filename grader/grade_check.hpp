// grade_check.hpp — what one graded check is, and what it finds.
//
// A task is graded by several checks of different weight (task 2: padding, slices, views, odd W ...).
// A check runs the graded implementation — direct calls of the task's methods on W ranks
// (rank_harness.hpp), or whole trainings read back through the op graph, the virtual clock and the
// memory ledger (graded_run.hpp) — and returns what fraction of its points it earned. Whatever it lost
// comes with one diagnostic: what was expected, what came, and the likely cause in the student's terms.
// The grader runs every check in a process of its own (check_process.hpp), so a crash, a hang or an
// exception in the student's code costs only that check.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/fsdp/fsdp_tasks.hpp"

namespace fsdplab::grading {

// One line of a check's budget (MIT 6.5840's style): what the graded code spent beside what the reference
// spends on the same case, so "correct but wasteful" shows as a number.
struct BudgetLine {
  std::string what;  // "collectives", "bytes moved", "peak param_full", "overlap"
  double graded = 0;
  double reference = 0;
  std::string unit;  // "", "MB", "%"
};

// The cause of a check that a TODO stopped, wherever the TODO was met.
inline constexpr const char* kTodoLeft = "a TODO is left in the task";
// The cause of a HostTouchedDeviceMemory (engine/runtime/device.hpp), wherever it stops a check.
inline constexpr const char* kRawPointerCause =
    "the graded code touched device memory through a raw pointer on the host (Tensor::f32() and its kin are for op "
    "bodies; on a GPU that address is the device's): write it with copy_from() after synchronize(), read it with "
    "to_vector()";
// The cause of a CollectiveTimedOut (engine/comm/communicator.hpp), wherever it stops a check: the error names where
// each rank waits.
inline constexpr const char* kCollectiveHangCause =
    "a collective that not every rank of its group made (see got: where each rank waits): each rank of a group makes "
    "the same collective calls in the same order, so a call under a condition that differs between ranks (its rank, "
    "its group rank) leaves the ranks that made it waiting";

// What a check found.
struct CheckOutcome {
  double fraction = 1;  // of the check's points earned, from 0 to 1
  // The diagnostic, when fraction < 1.
  std::string expected;
  std::string got;
  std::string cause;  // the likely mistake, in the student's terms
  std::vector<BudgetLine> budget;
  // Where set, the command that shows this outcome, in Check::show's form, in place of the check's own: for a
  // case the check's command does not run (another strategy, another world).
  std::string show;
  // The race detector stopped what the check ran: the command shows the run going to the race, without the
  // --break that would stop it at the task's first event, before anything is wrong.
  bool raced = false;
  // No run the dashboard makes shows this outcome (a training's end-of-step host sync hides a missing event): no
  // command is given, where the check's own would draw a picture equal to the reference's.
  bool unseen = false;

  static CheckOutcome pass() { return {}; }
  static CheckOutcome fail(std::string expected, std::string got, std::string cause, double fraction = 0) {
    return {fraction, std::move(expected), std::move(got), std::move(cause), {}, {}, false};
  }
  // A failure the race detector found: `race`'s report (a RaceError's what()) is the "got".
  static CheckOutcome race(std::string expected, std::string_view report, std::string cause) {
    return {0, std::move(expected), "the race detector: " + std::string(report), std::move(cause), {}, {}, true};
  }
  // A check of `parts` independent parts, of which `failed` lost theirs (each its got and cause): one diagnostic,
  // the gots and the causes each joined by "; ", earning the fraction of the parts that held.
  static CheckOutcome from_parts(std::string expected, const std::vector<std::pair<std::string, std::string>>& failed,
                                 int parts) {
    if (failed.empty()) return pass();
    std::string got, cause;
    for (const auto& [g, why] : failed) {
      got += (got.empty() ? "" : "; ") + g;
      cause += (cause.empty() ? "" : "; ") + why;
    }
    return fail(std::move(expected), got, cause, 1.0 - static_cast<double>(failed.size()) / parts);
  }
  bool passed() const { return fraction >= 1; }
};

// What a check is given.
struct CheckContext {
  int task = 0;           // the task graded
  const FsdpTasks& tasks;      // the reference, with the graded implementation in `task`'s slot
  const FsdpTasks& reference;  // the reference everywhere
  std::string impl;       // the graded implementation as --impl names it for task `task`: "student", "mutant:NAME"
  std::uint64_t seed = 0; // --seed: the model's initialisation and the data
  std::filesystem::path scratch;  // a folder of this check's own, removed after it

  // "--impl 3=student": what puts the graded implementation in its slot on the command line.
  std::string impl_flag() const;
};

// The id of a course's held-out case begins with this ("case:W5 grad_op"), a built-in check's never does.
inline constexpr std::string_view kHeldOutCaseIdPrefix = "case:";
// How a held-out case's check title begins ("held-out case 'W5 grad_op'"): all that a student's text shows of it.
inline std::string held_out_case_title(std::string_view name) { return "held-out case '" + std::string(name) + "'"; }

struct Check {
  int task = 0;
  std::string id;     // stable within the task ("padding"): the report's and the JSON's key
  std::string title;  // what is checked, one line
  int points = 1;
  // The command that shows what this check looks at in the dashboard, with "{impl}" standing for the
  // graded implementation's --impl flag: "fsdplab gui --model gpt2 --world 3 {impl} --break task:3" (its
  // "fsdplab" is printed as the path the grade was run with, show_command).
  std::string show;
  std::function<CheckOutcome(const CheckContext&)> run;

  bool is_held_out_case() const { return id.starts_with(kHeldOutCaseIdPrefix); }
};

// The message of the Error `call` throws, "" when it returns: for the errors a task must raise on bad input.
// A TaskNotImplemented (a TODO left) is no answer: it is rethrown, and the check scores it as a TODO.
std::string error_raised(const std::function<void()>& call);

// "--impl 3=student": the --impl flag that puts `impl` in task `task`'s slot.
std::string impl_flag(int task, const std::string& impl);
inline std::string CheckContext::impl_flag() const { return grading::impl_flag(task, impl); }

// How a printed command calls fsdplab unless told another: the path the labs' READMEs run it by, from the root of
// the repository.
inline constexpr const char* kShowProgram = "build/app/fsdplab";

// `check.show` with the --impl flag of implementation `impl` ("student", "mutant:NAME", "reference": without
// --compare impl) in place of "{impl}", and `program` in place of its leading "fsdplab": a command runnable as
// printed ("build/app/fsdplab gui ...").
std::string show_command(const Check& check, const std::string& impl, const std::string& program = kShowProgram);
// `text` (a diagnostic's got or cause) with each command it quotes ("fsdplab run ...", after a space, a parenthesis or
// a backquote) called by `program`, as its show command is.
std::string with_program(std::string text, const std::string& program);

}  // namespace fsdplab::grading
