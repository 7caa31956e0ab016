// labs/06-prefetch-overlap/student.cpp — task 6: your OverlapTask (engine/fsdp/overlap_task.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 6=student
#include "engine/fsdp/overlap_task.hpp"
#include "engine/fsdp/lab_todo.hpp"

namespace fsdplab {
namespace {

class StudentOverlap final : public OverlapTask {
 public:
  bool acquire_full(FsdpUnit& unit, FsdpRank& rank, bool prefetch) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::acquire_full");
  }

  void release_full(FsdpUnit& unit, FsdpRank& rank) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::release_full");
  }

  void acquire_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::acquire_grad");
  }

  void release_grad(FsdpUnit& unit, FsdpRank& rank) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::release_grad");
  }

  void release_staging(Tensor staging, const Event& done, FsdpRank& rank) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::release_staging");
  }

  FsdpUnit* after(PassPoint point, FsdpUnit& unit, FsdpRank& rank) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::after");
  }

  void begin_forward(FsdpRank& rank) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::begin_forward");
  }

  void end_backward(FsdpRank& rank) const override {
    // TODO(task 6)
    todo(6, "OverlapTask::end_backward");
  }
};

}  // namespace

const OverlapTask& student_overlap() {
  static const StudentOverlap task;
  return task;
}

}  // namespace fsdplab
