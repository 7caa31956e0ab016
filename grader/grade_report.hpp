// grade_report.hpp — a grade as a person reads it, and as a course's gradebook reads it (--json).
//
//   task 2  FlatParameter: flatten, pad, shard, view   student: labs/02-flat-parameter/student.cpp:17   7/10 points
//     pass  padding                the flat buffer is padded to the next multiple of W, no more 2/2
//     LOST  views                  parameters are views of the flat buffer, not copies (value and grad) 0/2
//           expected  a write to the flat buffer changes the parameter
//           got       ...
//           cause     point_views copies ...
//           see it    build/app/fsdplab gui --model gpt2 --world 3 --impl 2=student --compare impl
//           budget    collectives 24 (reference 24), bytes moved 1.20 MB (reference 1.20), ...
#pragma once
#include <filesystem>
#include <ostream>

#include "grader/grading.hpp"

namespace fsdplab::grading {

void print_grade(std::ostream& out, const GradeReport& report);
// The JSON a gradebook reads: per task and check, points, max, how it ended, the diagnostic, the budget; and
// the folder graded, in a submission's grade (GradeReport::submission). Written to a temporary name and renamed
// (output_file.hpp).
void write_grade_json(const std::filesystem::path& path, const GradeReport& report);
// The JSON of a submission that could not be graded at all (none of the nine lab files, a build that fails outside
// the labs): {"graded": false, "reason", "submission"}, so that a gradebook built from the files misses no one.
void write_refused_grade_json(const std::filesystem::path& path, const GradedSubmission& submission,
                              const std::string& reason);
// What is wrong with `text`, a grade's JSON as write_grade_json writes it for `tasks` (every task when empty), "" when
// it is sound: it parses, says graded, holds exactly those tasks, each with every built-in check of its catalog at
// its points (held-out cases beside them), no check above its max, and each total the sum of its parts. A
// submission's grade is written by the process that runs the student's code: the course's fsdplab reads it back
// through this before it files it ([Note: what a submission's code may do], app/submission_sandbox.cpp).
std::string unsound_grade_json(const std::string& text, const std::vector<int>& tasks);

// `fsdplab grade --mutants`: task, mutant, points, and the check that caught it with its diagnostic.
void print_mutants(std::ostream& out, const MutantsReport& report);

}  // namespace fsdplab::grading
