// fsdp_task.hpp — what every task interface of the lab shares: where its implementation is defined.
//
// Each task (meta_init.hpp ... cpu_offload_task.hpp) derives from FsdpTask. The base records the file and
// line of the class that implements it, with no code in that class: each task interface's constructor
// takes a defaulted std::source_location, and a default argument is evaluated where the implementing
// class's implicit constructor is, which the compiler places at that class. So step-through can say
// "labs/03-forward/student.cpp:13" or "engine/fsdp/forward_reference.cpp:8" for whichever implementation
// a run selected. Its functions are defined with the task set's, in fsdp_tasks.cpp.
#pragma once
#include <source_location>
#include <string>
#include <string_view>

namespace fsdplab {

// `path` from the repository's top: from the last "engine/", "labs/" or "tests/" folder in it on
// ("labs/03-forward/student.cpp"); the path itself when it has none of them.
std::string_view repository_path(std::string_view path);

class FsdpTask {
 public:
  explicit FsdpTask(std::source_location origin = std::source_location::current()) : origin_(origin) {}
  virtual ~FsdpTask() = default;
  FsdpTask(const FsdpTask&) = delete;
  FsdpTask& operator=(const FsdpTask&) = delete;

  // The implementing class's file as the compiler saw it (an absolute path in this build).
  const std::source_location& origin() const { return origin_; }
  // "engine/fsdp/forward_reference.cpp:8": the file from the repository's top (labs/, engine/, or the
  // build's folder for generated copies), and the line of the implementing class; a reference compiled in
  // another tree (a handout's, prebuilt) says its source is not in this one.
  std::string where() const;
  // Whether the implementing class is a reference's (engine/fsdp/*_reference.cpp), wherever it was compiled: what
  // the grader refuses as a student's own code.
  bool is_a_reference() const;

 private:
  std::source_location origin_;
};

}  // namespace fsdplab
