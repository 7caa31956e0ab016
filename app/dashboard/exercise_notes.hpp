// exercise_notes.hpp — what a task's code was supposed to do at an FSDP event, in the exercise's words,
// for the step-through panel: one short paragraph per (task, event kind), all in one table
// (exercise_notes.cpp), each ending with the lab folder's README (task_info(n).lab).
#pragma once
#include <string>

#include "engine/fsdp/fsdp_observer.hpp"

namespace fsdplab::app {

// "Task 3 · forward: all-gather before, free after"; "outside the tasks" for 0 or another number.
std::string task_heading(int task);

// The paragraph for `kind` of task `task`'s code (the task's general one where the table has none for
// that kind), then "Exercise: labs/03-forward/README.md"; empty outside the tasks.
std::string exercise_note(int task, FsdpEventKind kind);

}  // namespace fsdplab::app
