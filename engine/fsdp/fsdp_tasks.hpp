// fsdp_tasks.hpp — the nine task implementations one FSDP run uses, the reference set, and choosing
// the student's implementation of some of them (--impl).
//
// Each task is an interface of its own (meta_init.hpp ... cpu_offload_task.hpp) that includes no other
// task's header, with its reference implementation in its own file (*_reference.cpp) and a lab skeleton
// in labs/NN-name/student.cpp. The tasks never call each other. During a step only the unit lifecycle
// (unit_lifecycle.hpp) calls them; before and after it: wrapping the model (fully_sharded_model.cpp: tasks 7, 2,
// 1 and 3's reshard choice), checking a run whole (train/fsdp_run_plan.cpp: task 7), splitting the groups
// (train/fsdp_trainer.cpp: task 8), checkpoints (train/training_checkpoint.cpp: tasks 2 and 7) and the
// dashboard's FlatParameter map (tasks 2, 7 and 8).
#pragma once
#include <array>
#include <string>
#include <string_view>

#include "engine/fsdp/backward_task.hpp"
#include "engine/fsdp/cpu_offload_task.hpp"
#include "engine/fsdp/flat_parameter.hpp"
#include "engine/fsdp/forward_task.hpp"
#include "engine/fsdp/hybrid_shard_task.hpp"
#include "engine/fsdp/integration_task.hpp"
#include "engine/fsdp/meta_init.hpp"
#include "engine/fsdp/overlap_task.hpp"
#include "engine/fsdp/sharded_optimizer.hpp"

namespace fsdplab {

struct FsdpTasks {
  const MetaInitTask* meta_init = nullptr;                // task 1
  const FlatParameterTask* flat_parameter = nullptr;      // task 2
  const ForwardTask* forward = nullptr;                   // task 3
  const BackwardTask* backward = nullptr;                 // task 4
  const ShardedOptimizerTask* optimizer = nullptr;        // task 5
  const OverlapTask* overlap = nullptr;                   // task 6
  const IntegrationTask* integration = nullptr;           // task 7
  const HybridShardTask* hybrid_shard = nullptr;          // task 8 (bonus)
  const CpuOffloadTask* cpu_offload = nullptr;            // task 9 (bonus)

  // Task `number`'s implementation (1..9); an Error for another number.
  const FsdpTask& task(int number) const;
  // An Error naming the first task that has no implementation.
  void check_complete() const;
  // Puts `impl` in task `number`'s slot; an Error when it does not implement that task's interface.
  void set(int number, const FsdpTask& impl);
  friend bool operator==(const FsdpTasks&, const FsdpTasks&) = default;  // the same implementation in every slot
};

// Every task's reference implementation.
FsdpTasks reference_tasks();

// ---- the lab's tasks, by number -------------------------------------------------------------------

constexpr int kTaskCount = 9;

struct TaskInfo {
  int number;
  std::string_view interface;  // "ForwardTask"
  std::string_view reference;  // "reference_forward": the function that returns the reference's implementation
  std::string_view lab;        // "labs/03-forward"
  std::string_view title;      // "forward: all-gather before, free after"
  bool bonus = false;          // tasks 8 and 9: beyond the assignment's seven, graded as extra credit
};

// Task `number` (1..9); an Error for another number.
const TaskInfo& task_info(int number);

// ---- --impl ---------------------------------------------------------------------------------------

// Which implementation each task runs: `of[n - 1]` for task n is "reference", "student" (the lab's
// labs/NN-name/student.cpp) or "mutant:NAME" (a known-wrong implementation the grader is tested with,
// labs/mutants/). labs/student_tasks.hpp's tasks_for turns a choice into the tasks a run uses.
struct ImplChoice {
  ImplChoice() { of.fill("reference"); }
  std::array<std::string, kTaskCount> of;
  // Whether task `number` runs something other than the reference.
  bool replaced(int number) const;
  bool any_replaced() const;
  // The tasks replaced, for the step-through controls: `[n - 1]` for task n.
  std::array<bool, kTaskCount> replaced_tasks() const;
  friend bool operator==(const ImplChoice&, const ImplChoice&) = default;
};

// --impl: "reference" (every task), "student" (every task), or a comma list of TASK=IMPL with IMPL
// reference, student or mutant:NAME ("3=student,6=mutant:no-prefetch"; tasks not named run the reference).
// Whether a mutant NAME exists is checked where the mutants are (tasks_for). An Error naming what was expected.
ImplChoice parse_impl(std::string_view text);
// "reference", "student", or the tasks that run something else: "3=student,6=mutant:no-prefetch".
std::string impl_name(const ImplChoice& choice);

}  // namespace fsdplab
