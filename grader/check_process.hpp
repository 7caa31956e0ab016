// check_process.hpp — every check in a process of its own, with a time limit.
//
// The graded code is a student's: it may throw, crash, loop forever or wait for a peer that never comes.
// None of that may take the grader down or cost more than the check it happens in. So the grader forks
// once per check; the child runs the check and writes its outcome back through a pipe; the parent keeps
// `parallel` children going, kills one that outlives the limit, and turns whatever ended a child into the
// check's diagnostic: "check timed out after 10 s", "crashed with SIGSEGV in StudentForward::all_gather
// (labs/03-forward/student.cpp:24)", "the run stopped with an error: rank 0 failed: stream compute waits on event
// 'gathered', which was never recorded; ...". See [Note: where a crash happened].
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "grader/grade_check.hpp"

namespace fsdplab::grading {

// not_built: never run, its task's code did not build into the graded fsdplab (grade --submission: GradeRequest).
// uses_reference: never run, the student's task is a reference's class (grading.hpp, TaskGrade::uses_reference).
enum class CheckEnd { finished, threw, crashed, timed_out, not_built, uses_reference };
// "finished", "threw", "crashed", "timed out", "not built", "uses the reference"
std::string_view check_end_name(CheckEnd end);

// One check to run, with the tasks it grades.
struct CheckJob {
  const Check* check = nullptr;
  FsdpTasks tasks;       // the reference, with the graded implementation in check->task's slot
  std::string impl;      // as --impl names it: "student", "reference", "mutant:NAME"
  std::uint64_t seed = 0;
};

struct CheckRun {
  CheckEnd end = CheckEnd::finished;
  CheckOutcome outcome;  // what the check found, or the runner's diagnostic for how it ended
};

struct IsolationLimits {
  double seconds = 20;  // a check still running after this long is killed and scores 0
  int parallel = 1;     // checks at once
};

// Runs every job in a child process of its own (fork), `limits.parallel` at a time, and returns their
// runs in the jobs' order. Call it from a single-threaded process: children are forked from the caller.
std::vector<CheckRun> run_isolated(std::span<const CheckJob> jobs, const IsolationLimits& limits);

// Runs one job here, in this process (the child's half of run_isolated; also for a debugger).
CheckRun run_here(const CheckJob& job, const std::filesystem::path& scratch);

}  // namespace fsdplab::grading
