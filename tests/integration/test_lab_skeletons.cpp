// The untouched lab skeletons (labs/NN-name/student.cpp, built into fsdplab_labs): a run with
// --impl N=student fails with the skeleton's message naming the task, the method and the lab folder —
// the README to read and the line of the TODO — and never crashes or hangs, however many ranks wait on
// the one that stopped.
#include <gtest/gtest.h>

#include "engine/fsdp/lab_todo.hpp"
#include "fsdp_runs.hpp"
#include "labs/student_tasks.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using namespace testing;

// A run that reaches task `task`: the bonus tasks run only under their own options.
FsdpRun run_reaching(int task) {
  FsdpRun fsdp;
  fsdp.run = gpt2_run(task == 8 ? 4 : 2, 8, 16, 2);
  if (task == 8) {
    fsdp.options.strategy = ShardingStrategy::hybrid_shard;
    fsdp.options.hybrid_group = 2;
  }
  fsdp.options.offload = task == 9;
  ImplChoice choice;
  choice.of[static_cast<std::size_t>(task - 1)] = "student";
  fsdp.tasks = tasks_for(choice);
  return fsdp;
}

TEST(LabSkeletons, EachUntouchedSkeletonFailsNamingTaskMethodAndFolder) {
  for (int task = 1; task <= kTaskCount; ++task) {
    SCOPED_TRACE("task " + std::to_string(task));
    const TaskInfo& info = task_info(task);
    const FsdpRun fsdp = run_reaching(task);
    const std::string where = fsdp.tasks.task(task).where();
    EXPECT_EQ(where.rfind(std::string(info.lab) + "/student.cpp:", 0), 0u) << where;
    try {
      train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
      ADD_FAILURE() << "the skeleton of task " << task << " trained";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_TRUE(contains(message, "task " + std::to_string(task) + ", " + std::string(info.interface) + "::"))
          << message;
      EXPECT_TRUE(contains(message, ": not implemented yet — see " + std::string(info.lab) + "/README.md")) << message;
      EXPECT_TRUE(contains(message, "(the TODO at " + std::string(info.lab) + "/student.cpp:")) << message;
    }
  }
}

TEST(LabSkeletons, AllStudentTasksFailAtTheFirstTaskTheEngineCalls) {
  FsdpRun fsdp = run_reaching(1);
  fsdp.tasks = tasks_for(parse_impl("student"));
  // Wrapping the model is the first thing a run does: task 7 plans the units.
  EXPECT_TRUE(contains(refusal_of(fsdp), "task 7, IntegrationTask::plan_units: not implemented yet"));
}

TEST(LabSkeletons, ImplChoicesParseAndNameThemselves) {
  EXPECT_FALSE(parse_impl("reference").any_replaced());
  EXPECT_EQ(impl_name(parse_impl("student")), "student");
  EXPECT_EQ(impl_name(parse_impl("6=student,3=student")), "3=student,6=student");
  EXPECT_EQ(impl_name(parse_impl("3=reference")), "reference");
  EXPECT_EQ(impl_name(parse_impl("6=mutant:no-prefetch,3=student")), "3=student,6=mutant:no-prefetch");
  for (const char* bad :
       {"", "3", "0=student", "10=student", "3=mine", "3=student,3=reference", "x=student", "3=mutant:"}) {
    const std::string message = error_of([&] { parse_impl(bad); });
    EXPECT_TRUE(contains(message, "expected reference, student, or a comma list of TASK=IMPL with TASK from 1 to 9 and "
                                  "IMPL reference, student or mutant:NAME"))
        << bad << ": " << message;
  }
}

}  // namespace
}  // namespace fsdplab
