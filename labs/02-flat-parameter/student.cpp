// labs/02-flat-parameter/student.cpp — task 2: your FlatParameterTask (engine/fsdp/flat_parameter.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 2=student
#include <algorithm>  // std::max, std::min
#include <set>        // finding a parameter given twice

#include "engine/fsdp/flat_parameter.hpp"
#include "engine/fsdp/lab_todo.hpp"
#include "engine/runtime/error.hpp"  // check(condition, message parts...)

namespace fsdplab {
namespace {

class StudentFlatParameter final : public FlatParameterTask {
 public:
  // Lay out `params` (one unit's, in the order given) for `world` ranks and return the FlatParamLayout
  // (engine/fsdp/flat_param_layout.hpp):
  //   - entries: one {param, offset, numel} per parameter, in the order given; each offset is the end of
  //     the previous parameter rounded UP to a multiple of `align` (the first at 0);
  //   - world, align: as given; used_numel: the end of the last parameter;
  //   - padded_numel: used_numel rounded UP to a multiple of `world` (so shard_numel() is exact), and never 0:
  //     a unit whose parameters are all empty still gets one element a rank.
  // An Error (check(...)) for an empty `params`, world < 1, align < 1, or a parameter given twice.
  FlatParamLayout plan(std::span<Parameter* const> params, int world, std::int64_t align) const override {
    // TODO(task 2)
    todo(2, "FlatParameterTask::plan");
  }

  // Rank `rank`'s slices, in flat order. Its chunk is [rank * shard_numel(), (rank + 1) * shard_numel())
  // of the flat buffer; for every entry that overlaps it, one ShardSlice {param, param_begin, count,
  // shard_offset}: elements [param_begin, param_begin + count) of the parameter (parameter space) are
  // elements [shard_offset, shard_offset + count) of the shard (shard space). Empty for a rank whose
  // chunk is all padding. An Error for a rank outside [0, layout.world).
  std::vector<ShardSlice> shard_slices(const FlatParamLayout& layout, int rank) const override {
    // TODO(task 2)
    todo(2, "FlatParameterTask::shard_slices");
  }

  // Point every parameter's `field` (&Parameter::value or &Parameter::grad) at its VIEW of `flat`
  // (layout.padded_numel elements; an Error otherwise): flat.view(entry.offset, entry.param->shape),
  // named with set_name(entry.param->name), assigned as (entry.param->*field) = ... . The view shares
  // flat's storage and dtype; never allocate or copy here.
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
