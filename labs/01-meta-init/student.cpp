// labs/01-meta-init/student.cpp — task 1: your MetaInitTask (engine/fsdp/meta_init.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 1=student
#include <vector>  // a host array of one shard's values

#include "engine/fsdp/lab_todo.hpp"
#include "engine/fsdp/meta_init.hpp"
#include "engine/runtime/error.hpp"  // check(condition, message parts...)

namespace fsdplab {
namespace {

class StudentMetaInit final : public MetaInitTask {
 public:
  // Fill `shard` (f32, one rank's chunk of a unit's flat buffer, shard.numel() elements) with the unit's
  // initial values under `seed`:
  //   - for each ShardSlice s in `slices`: elements [s.param_begin, s.param_begin + s.count) of parameter
  //     *s.param go to elements [s.shard_offset, s.shard_offset + s.count) of the shard, drawn with
  //       s.param->init.fill(std::span<float> out, seed, s.param->name, first_index)
  //     where out[j] is element first_index + j of the parameter: draw at the slice's OWN indices;
  //   - everything no slice covers (alignment gaps, padding) is zero;
  //   - hold at most one shard's values on the host (a std::vector<float> of shard.numel()), allocate
  //     nothing on the device;
  //   - on a dry run (shard.device().dry_run()) write nothing and return;
  //   - the host writes device memory at the end: shard.device().synchronize(), then
  //     shard.copy_from(values).
  // Test at --world 2 AND --world 3 --batch 6: at --world 1 every slice starts at element 0 and some
  // mistakes do not show.
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
