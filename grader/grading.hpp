// grading.hpp — grading an implementation task by task, and grading the grader with the mutants.
//
//   grade()          each selected task's checks (built-in, and a course's held-out cases) against the
//                    implementation --impl puts in that task's slot, the reference everywhere else;
//                    points per check, a diagnostic for every point lost
//   grade_mutants()  every known-wrong implementation (labs/mutants/) graded in its own task: each must
//                    lose points, and the check that caught it says why
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/fsdp/fsdp_tasks.hpp"
#include "grader/check_process.hpp"
#include "labs/mutants/mutants.hpp"

namespace fsdplab::grading {

struct GradeRequest {
  std::vector<int> tasks;     // the tasks to grade; empty: all nine
  ImplChoice impl;            // what each task runs: task N is graded on impl.of[N - 1]
  std::vector<Check> extra;   // a course's held-out cases (grading_cases.hpp), graded with their task
  std::uint64_t seed = 0;
  IsolationLimits limits;
  // How the diagnostics' "see it" commands call fsdplab: a path that runs it from the repository's root.
  std::string program = kShowProgram;
  // Tasks whose code did not build into this fsdplab (a submission's lab that does not compile or is missing,
  // grade_submission.hpp), each with the reason: its checks do not run and score 0 with it (CheckEnd::not_built).
  std::map<int, std::string> not_built;
};

struct GradedCheck {
  Check check;
  CheckRun run;
  double earned = 0;   // points
  std::string show;    // the dashboard command, with the graded --impl and the request's program
};

// Why a task's checks were not run (TaskGrade::not_run).
struct NotRun {
  CheckEnd end = CheckEnd::not_built;  // not_built or uses_reference
  std::string reason;
};

struct TaskGrade {
  int task = 0;
  std::string impl;   // "student", "reference", "mutant:NAME"
  std::string where;  // the implementing class's file and line
  std::vector<GradedCheck> checks;
  // Set when its checks were not run, each scoring 0 with this end and reason: the task's code did not build into
  // this fsdplab (CheckEnd::not_built, GradeRequest::not_built), or a student's task is a reference's class (a
  // student.cpp that includes the reference's source, or returns reference_NAME(): CheckEnd::uses_reference).
  std::optional<NotRun> not_run;
  double earned() const;
  int possible() const;
};

// The folder a submission's grade graded (`fsdplab grade --submission DIR`): DIR as given, and its absolute path.
struct GradedSubmission {
  std::string path;
  std::string absolute;
};

// Points to the hundredth: what a check earns, and every sum of them, so that the text and the JSON agree.
double round_points(double points);

struct GradeReport {
  std::string impl;      // impl_name of the request's choice
  std::string fsdplab_commit;  // the commit the grading fsdplab was built from ("...-dirty": edited; "unknown")
  std::optional<GradedSubmission> submission;  // set only in a submission's own grade
  std::uint64_t seed = 0;
  std::vector<TaskGrade> tasks;
  double seconds = 0;    // wall time of the whole grading, printed with the total
  double earned() const;
  int possible() const;
};

GradeReport grade(const GradeRequest& request);
// The tasks a selection grades, in its order: `tasks`, or every task (1 to 9) when it is empty.
std::vector<int> selected_tasks(const std::vector<int>& tasks);

struct MutantGrade {
  Mutant mutant;
  TaskGrade grade;
  bool caught() const { return grade.earned() < grade.possible(); }
  // The first check that lost points, nullptr when none did.
  const GradedCheck* caught_by() const;
};

struct MutantsReport {
  std::vector<MutantGrade> mutants;
  double seconds = 0;
  int caught() const;
};

// Every mutant of the selected tasks (empty: all), each graded in its task by its checks and the held-out
// cases (`extra`) of that task.
MutantsReport grade_mutants(const std::vector<int>& tasks, const std::vector<Check>& extra, std::uint64_t seed,
                            const IsolationLimits& limits);

}  // namespace fsdplab::grading
