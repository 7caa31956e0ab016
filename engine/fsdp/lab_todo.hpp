// lab_todo.hpp — what a lab skeleton's unimplemented method throws.
//
//   void all_gather(...) const override { todo(3, "ForwardTask::all_gather"); }
//
// fails the run with "task 3, ForwardTask::all_gather: not implemented yet — see labs/03-forward/README.md
// (the TODO at labs/03-forward/student.cpp:24)". On a rank's thread it ends the run like any Error: the
// other ranks are released from their collectives, nothing hangs. (todo is defined in fsdp_tasks.cpp.)
#pragma once
#include <source_location>
#include <string_view>

#include "engine/runtime/error.hpp"

namespace fsdplab {

class TaskNotImplemented : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void todo(int task, std::string_view method, std::source_location where = std::source_location::current());

}  // namespace fsdplab
