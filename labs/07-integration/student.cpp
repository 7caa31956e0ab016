// labs/07-integration/student.cpp — task 7: your IntegrationTask (engine/fsdp/integration_task.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 7=student
#include <algorithm>
#include <map>

#include "engine/fsdp/integration_task.hpp"
#include "engine/fsdp/lab_todo.hpp"
#include "engine/runtime/error.hpp"  // check(condition, parts...)

namespace fsdplab {
namespace {

class StudentIntegration final : public IntegrationTask {
 public:
  // Split `model` into FSDP units, outermost first (pre-order: a unit's parent before it, the root first).
  //  - A module starts a unit when it is the root (parent() == nullptr) or when its kind() or its name()
  //    equals one of `unit_kinds` ("Block", "Linear", "transformer.wpe").
  //  - UnitPlan{module, name, params, parent}: name is module->name(), or "(root)" for the root; params are
  //    the own_parameters() of the unit's module and of every module below it that no inner unit took, in
  //    registration order, each once (never module->parameters(): that is the whole subtree); parent is the
  //    index of the nearest enclosing unit, -1 for none.
  //  - check(...) (engine/runtime/error.hpp) throws an Error for: a wrapped module with no parameters; a
  //    tied parameter (Module::shared_parameters()) used by a module whose unit neither owns it nor is
  //    nested inside its owner's unit; a model with no parameters at all.
  //  - A root UNIT left holding no parameter gets no unit: erase it and renumber the parents
  //    (its children get -1, every other parent index drops by one).
  // Walk model.modules() (pre-order) once; remember each module's unit and each parameter's unit.
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    // TODO(task 7)
    todo(7, "IntegrationTask::plan_units");
  }
};

}  // namespace

const IntegrationTask& student_integration() {
  static const StudentIntegration task;
  return task;
}

}  // namespace fsdplab
