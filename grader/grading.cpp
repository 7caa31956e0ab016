#include "grader/grading.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/runtime/error.hpp"
#include "engine/runtime/input_file.hpp"
#include "engine/runtime/wall_clock.hpp"
#include "grader/check_catalog.hpp"
#include "grader/reference_use.hpp"
#include "labs/student_tasks.hpp"

namespace fsdplab::grading {

std::vector<int> selected_tasks(const std::vector<int>& tasks) {
  if (!tasks.empty()) return tasks;
  std::vector<int> all;
  for (int n = 1; n <= kTaskCount; ++n) all.push_back(n);
  return all;
}

namespace {

// Every check of `grade` scores 0 without running: `end` and `reason` say why (TaskGrade::not_run), `expected` what
// running it needed, `cause` what stood in the way.
void score_not_run(TaskGrade& grade, CheckEnd end, std::string reason, const std::string& expected,
                   const std::string& cause) {
  for (GradedCheck& g : grade.checks) g.run = {end, CheckOutcome::fail(expected, reason, cause)};
  grade.not_run = NotRun{end, std::move(reason)};
}

// A student's task that is the reference's work, `how` said: a lab is graded on code of its own.
void score_uses_reference(TaskGrade& grade, const std::string& how) {
  const TaskInfo& info = task_info(grade.task);
  score_not_run(grade, CheckEnd::uses_reference,
                std::string(info.lab) + "/student.cpp hands the grader the reference's implementation (" + grade.where +
                    "), not code of its own: " + how,
                "the lab's own implementation of " + std::string(info.interface),
                "a lab is graded on the code it holds, not on the reference's");
}

// How a student's `implementation` of `task` is the reference's work, if it is: its class is the reference's,
// or its source (the file its class was compiled from) calls the reference's. A source that cannot be read (a
// binary moved away from its build) is not judged.
std::optional<std::string> reference_work(int task, const FsdpTask& implementation) {
  if (implementation.is_a_reference()) return "it includes the reference's source, or returns the reference's task";
  std::string source;
  try {
    source = read_input_file(implementation.origin().file_name(), "the lab's source", 16u << 20);
  } catch (const Error&) {
    return std::nullopt;
  }
  const std::optional<std::string> named = names_its_reference(task, source);
  if (!named) return std::nullopt;
  return *named + ", which returns the reference's implementation, whose work the lab's class hands on";
}

// A task whose code did not build (no command to see it: there is no code).
void score_not_built(TaskGrade& grade, const std::string& reason) {
  // The class found is this tree's skeleton, built in the submission's place: not a file the submission holds.
  grade.where = "not built (" + grade.where + ": this tree's skeleton, built in its place)";
  score_not_run(grade, CheckEnd::not_built, reason, "the task's code built into the graded fsdplab",
                "the rest was graded with this lab's untouched skeleton in its place");
}

// `task`'s checks (built-in, then the held-out cases of that task) for implementation `impl`, not run yet; all
// scored 0 already when a student's task is a reference's class.
TaskGrade plan_task(int task, const std::string& impl, const std::vector<Check>& extra) {
  ImplChoice choice;
  choice.of[static_cast<std::size_t>(task - 1)] = impl;
  const FsdpTask& implementation = tasks_for(choice).task(task);
  TaskGrade grade{task, impl, implementation.where(), {}};
  std::vector<Check> checks = task_checks(task);
  for (const Check& c : extra)
    if (c.task == task) checks.push_back(c);
  for (Check& c : checks) grade.checks.push_back({std::move(c), {}, 0, ""});
  if (impl == "student") {
    if (const std::optional<std::string> how = reference_work(task, implementation)) score_uses_reference(grade, *how);
  }
  return grade;
}

// The jobs of `grade`'s checks, appended to `jobs`; they point at the grade's checks, which must stay put.
void add_jobs(const TaskGrade& grade, std::uint64_t seed, std::vector<CheckJob>& jobs) {
  ImplChoice choice;
  choice.of[static_cast<std::size_t>(grade.task - 1)] = grade.impl;
  const FsdpTasks tasks = tasks_for(choice);
  for (const GradedCheck& g : grade.checks) jobs.push_back({&g.check, tasks, grade.impl, seed});
}

// `command` without its --break: a run the race detector or an error stops is shown running to it, which the
// timeline marks and goes to (the error under the runs); a break stops it first, at the task's first event, where
// nothing is wrong yet, or never comes (ranks that wait in a collective for a rank stopped at it).
std::string without_break(std::string command) {
  const std::size_t at = command.find(" --break ");
  if (at == std::string::npos) return command;
  const std::size_t end = command.find(' ', at + std::string_view(" --break ").size());
  command.erase(at, (end == std::string::npos ? command.size() : end) - at);
  return command;
}

// Fills the grades' checks from `runs`, in the order add_jobs made the jobs.
void fill(std::vector<TaskGrade*> grades, const std::vector<CheckRun>& runs, const std::string& program) {
  std::size_t next = 0;
  for (TaskGrade* grade : grades) {
    for (GradedCheck& g : grade->checks) {
      g.run = runs[next++];
      g.run.outcome.got = with_program(std::move(g.run.outcome.got), program);
      g.run.outcome.cause = with_program(std::move(g.run.outcome.cause), program);
      g.earned = round_points(g.check.points * std::clamp(g.run.outcome.fraction, 0.0, 1.0));
      Check shown = g.check;
      if (!g.run.outcome.show.empty()) shown.show = g.run.outcome.show;  // the case that failed
      if (g.run.outcome.raced || g.run.end == CheckEnd::threw) shown.show = without_break(shown.show);
      g.show = g.run.outcome.unseen ? "" : show_command(shown, grade->impl, program);
    }
  }
}

}  // namespace

double round_points(double points) { return std::round(points * 100) / 100; }

double TaskGrade::earned() const {
  double sum = 0;
  for (const GradedCheck& c : checks) sum += c.earned;
  return round_points(sum);
}

int TaskGrade::possible() const {
  int sum = 0;
  for (const GradedCheck& c : checks) sum += c.check.points;
  return sum;
}

double GradeReport::earned() const {
  double sum = 0;
  for (const TaskGrade& t : tasks) sum += t.earned();
  return round_points(sum);
}

int GradeReport::possible() const {
  int sum = 0;
  for (const TaskGrade& t : tasks) sum += t.possible();
  return sum;
}

GradeReport grade(const GradeRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  GradeReport report;
  report.impl = impl_name(request.impl);
  report.seed = request.seed;
  for (int task : selected_tasks(request.tasks))
    report.tasks.push_back(plan_task(task, request.impl.of[static_cast<std::size_t>(task - 1)], request.extra));
  std::vector<CheckJob> jobs;
  std::vector<TaskGrade*> grades;
  for (TaskGrade& t : report.tasks) {
    if (const auto reason = request.not_built.find(t.task); reason != request.not_built.end())
      score_not_built(t, reason->second);
    if (t.not_run) continue;  // scored already, here or by plan_task
    add_jobs(t, request.seed, jobs);
    grades.push_back(&t);
  }
  fill(grades, run_isolated(jobs, request.limits), request.program);
  report.seconds = seconds_since(start);
  return report;
}

const GradedCheck* MutantGrade::caught_by() const {
  for (const GradedCheck& c : grade.checks)
    if (c.earned < c.check.points) return &c;
  return nullptr;
}

int MutantsReport::caught() const {
  return static_cast<int>(
      std::count_if(mutants.begin(), mutants.end(), [](const MutantGrade& m) { return m.caught(); }));
}

MutantsReport grade_mutants(const std::vector<int>& tasks, const std::vector<Check>& extra, std::uint64_t seed,
                            const IsolationLimits& limits) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> wanted = selected_tasks(tasks);
  MutantsReport report;
  for (const Mutant& m : mutant_catalog())
    if (std::find(wanted.begin(), wanted.end(), m.task) != wanted.end())
      report.mutants.push_back({m, plan_task(m.task, "mutant:" + std::string(m.name), extra)});
  std::vector<CheckJob> jobs;
  std::vector<TaskGrade*> grades;
  for (MutantGrade& m : report.mutants) {
    add_jobs(m.grade, seed, jobs);
    grades.push_back(&m.grade);
  }
  fill(grades, run_isolated(jobs, limits), kShowProgram);
  report.seconds = seconds_since(start);
  return report;
}

}  // namespace fsdplab::grading
