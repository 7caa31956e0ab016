// labs/01-meta-init/student.cpp — task 1: your MetaInitTask (engine/fsdp/meta_init.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 1=student
#include "engine/fsdp/meta_init.hpp"
#include "engine/fsdp/lab_todo.hpp"

namespace fsdplab {
namespace {

class StudentMetaInit final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) const override {
    // TODO(task 1)
    todo(1, "MetaInitTask::init_shard");
  }
};

}  // namespace

const MetaInitTask& student_meta_init() {
  static const StudentMetaInit task;
  return task;
}

}  // namespace fsdplab
