// reference_use.hpp — whether a student's lab hands the grader the reference's work through a class of its own:
// a lab whose methods call the reference's (`reference_forward().all_gather(...)`) would pass every check with
// none of the task done. A lab whose class *is* the reference's (it includes the reference's source, or returns
// `reference_forward()` itself) is caught by FsdpTask::is_a_reference instead.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace fsdplab::grading {

// `source`, the text of C++ code, with its comments and string and character literals blanked (each character of
// them a space, newlines kept): what is left is the code, at the lines and columns it had.
std::string code_only(std::string_view source);

// Where the C++ text `source` of task `task`'s lab names a function that returns the reference's implementation
// of that task: the task's own (`reference_forward` for task 3, TaskInfo::reference) or `reference_tasks`, which
// holds every task's. "line 12 names reference_forward()"; nothing when no code (comments and strings aside)
// names one.
std::optional<std::string> names_its_reference(int task, std::string_view source);

}  // namespace fsdplab::grading
