// The tasks stand alone, checked on the sources: no task interface header includes another task's
// header, and no reference implementation or lab skeleton includes or names another task — only the
// unit lifecycle (engine/fsdp/unit_lifecycle.*) calls the tasks.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/fsdp/fsdp_tasks.hpp"
#include "grader/reference_use.hpp"

namespace fsdplab {
namespace {

namespace fs = std::filesystem;

struct TaskFiles {
  int task;
  std::string header;     // engine/fsdp/...
  std::string reference;  // engine/fsdp/..._reference.cpp
};

const std::vector<TaskFiles> kFiles = {
    {1, "meta_init.hpp", "meta_init_reference.cpp"},
    {2, "flat_parameter.hpp", "flat_parameter_reference.cpp"},
    {3, "forward_task.hpp", "forward_reference.cpp"},
    {4, "backward_task.hpp", "backward_reference.cpp"},
    {5, "sharded_optimizer.hpp", "sharded_optimizer_reference.cpp"},
    {6, "overlap_task.hpp", "overlap_reference.cpp"},
    {7, "integration_task.hpp", "integration_reference.cpp"},
    {8, "hybrid_shard_task.hpp", "hybrid_shard_reference.cpp"},
    {9, "cpu_offload_task.hpp", "cpu_offload_reference.cpp"},
};

// Headers that hold every task, or call them: a task's code that includes one could call another task.
const std::vector<std::string> kAllTaskHeaders = {"engine/fsdp/fsdp_tasks.hpp", "engine/fsdp/unit_lifecycle.hpp",
                                                  "engine/fsdp/fully_sharded_model.hpp", "labs/student_tasks.hpp"};

std::string read_source(const std::string& relative) {
  const fs::path path = fs::path(FSDPLAB_SOURCE_DIR) / relative;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> includes_of(const std::string& text) {
  std::vector<std::string> found;
  const std::regex include(R"re(#include\s+"([^"]+)")re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), include); it != std::sregex_iterator(); ++it)
    found.push_back((*it)[1]);
  return found;
}

// What `text` (a source of task `task`, whose reference registers as `own`) does that a task may not:
// include or name another task's header or interface, include a header that holds them all, or call
// another task's reference. Empty when it stands alone.
std::vector<std::string> violations(const std::string& text, int task, const std::string& own) {
  std::vector<std::string> found;
  const std::vector<std::string> includes = includes_of(text);
  const auto included = [&](const std::string& header) {
    return std::find(includes.begin(), includes.end(), header) != includes.end();
  };
  const std::string code = grading::code_only(text);  // a comment or a string may mention another task; code may not
  for (const TaskFiles& other : kFiles) {
    if (other.task == task) continue;
    if (included("engine/fsdp/" + other.header))
      found.push_back("includes task " + std::to_string(other.task) + "'s engine/fsdp/" + other.header);
    const std::string interface(task_info(other.task).interface);
    if (std::regex_search(code, std::regex("\\b" + interface + "\\b")))
      found.push_back("names task " + std::to_string(other.task) + "'s interface " + interface);
  }
  for (const std::string& all : kAllTaskHeaders)
    if (included(all)) found.push_back("includes " + all);
  const std::regex call(R"(\breference_(\w+)\()");
  for (auto it = std::sregex_iterator(code.begin(), code.end(), call); it != std::sregex_iterator(); ++it)
    if ("reference_" + (*it)[1].str() != own) found.push_back("calls reference_" + (*it)[1].str());
  return found;
}

using Found = std::vector<std::string>;

// "reference_forward": the function the task's reference registers as.
std::string registration_of(const TaskFiles& f) { return std::string(task_info(f.task).reference); }

TEST(TaskIndependence, NoTaskHeaderIncludesAnother) {
  for (const TaskFiles& f : kFiles)
    EXPECT_EQ(violations(read_source("engine/fsdp/" + f.header), f.task, registration_of(f)), Found{}) << f.header;
}

TEST(TaskIndependence, NoReferenceTaskCallsAnother) {
  for (const TaskFiles& f : kFiles)
    EXPECT_EQ(violations(read_source("engine/fsdp/" + f.reference), f.task, registration_of(f)), Found{})
        << f.reference;
}

TEST(TaskIndependence, NoLabSkeletonIncludesAnotherTask) {
  for (const TaskFiles& f : kFiles) {
    const std::string file = std::string(task_info(f.task).lab) + "/student.cpp";
    EXPECT_EQ(violations(read_source(file), f.task, registration_of(f)), Found{}) << file;
  }
}

TEST(TaskIndependence, TheCheckFindsATaskThatUsesAnother) {
  // The check can fail: the lifecycle, which calls every task, is not alone, and neither is a forward
  // that includes task 2, names task 4's interface in code (not in a comment or a string), or calls task 6's
  // reference.
  const Found lifecycle = violations(read_source("engine/fsdp/unit_lifecycle.hpp"), 3, "reference_forward");
  EXPECT_NE(std::find(lifecycle.begin(), lifecycle.end(), "includes engine/fsdp/fsdp_tasks.hpp"), lifecycle.end());
  EXPECT_EQ(violations("// BackwardTask\nconst char* s = \"BackwardTask::zero_gradient\";\n", 3, "reference_forward"),
            Found{});
  EXPECT_EQ(violations("void f(const BackwardTask&);\n", 3, "reference_forward"),
            Found{"names task 4's interface BackwardTask"});
  EXPECT_EQ(violations("#include \"engine/fsdp/flat_parameter.hpp\"\nvoid f() { reference_overlap(); }\n", 3,
                       "reference_forward"),
            (Found{"includes task 2's engine/fsdp/flat_parameter.hpp", "calls reference_overlap"}));
}

}  // namespace
}  // namespace fsdplab
