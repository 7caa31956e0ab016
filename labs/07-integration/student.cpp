// labs/07-integration/student.cpp — task 7: your IntegrationTask (engine/fsdp/integration_task.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 7=student
#include "engine/fsdp/integration_task.hpp"
#include "engine/fsdp/lab_todo.hpp"

namespace fsdplab {
namespace {

class StudentIntegration final : public IntegrationTask {
 public:
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
