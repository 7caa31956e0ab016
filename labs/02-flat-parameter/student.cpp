// labs/02-flat-parameter/student.cpp — task 2: your FlatParameterTask (engine/fsdp/flat_parameter.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 2=student
#include "engine/fsdp/flat_parameter.hpp"
#include "engine/fsdp/lab_todo.hpp"

namespace fsdplab {
namespace {

class StudentFlatParameter final : public FlatParameterTask {
 public:
  FlatParamLayout plan(std::span<Parameter* const> params, int world, std::int64_t align) const override {
    // TODO(task 2)
    todo(2, "FlatParameterTask::plan");
  }

  std::vector<ShardSlice> shard_slices(const FlatParamLayout& layout, int rank) const override {
    // TODO(task 2)
    todo(2, "FlatParameterTask::shard_slices");
  }

  void point_views(const FlatParamLayout& layout, const Tensor& flat, Tensor Parameter::*field) const override {
    // TODO(task 2)
    todo(2, "FlatParameterTask::point_views");
  }
};

}  // namespace

const FlatParameterTask& student_flat_parameter() {
  static const StudentFlatParameter task;
  return task;
}

}  // namespace fsdplab
