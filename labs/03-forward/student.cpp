// labs/03-forward/student.cpp — task 3: your ForwardTask (engine/fsdp/forward_task.hpp).
//
// Read README.md in this folder first. Replace each todo(...) with your code; everything else in the
// engine stays as it is. Rebuild and run with your implementation of this task only:
//   bash scripts/build.sh
//   build/app/fsdplab run --model gpt2 --world 2 --impl 3=student
#include "engine/fsdp/forward_task.hpp"
#include "engine/fsdp/lab_todo.hpp"

namespace fsdplab {
namespace {

class StudentForward final : public ForwardTask {
 public:
  // Issue the all-gather of `shard` (this rank's chunk) from every rank of `group` into `full`
  // (group.world() chunks in rank order) ON THE ALL-GATHER STREAM, then record `gathered` on that same
  // stream behind it. The host does not wait.
  //   Stream Device::stream(Lane lane)                          Lane::all_gather
  //   void Communicator::all_gather(Stream, const Tensor& shard, const Tensor& full)
  //   void Device::record(Event& event, Lane lane)
  void all_gather(Device& device, Communicator& group, const Tensor& shard, const Tensor& full,
                  Event& gathered) const override {
    // TODO(task 3)
    todo(3, "ForwardTask::all_gather");
  }

  // Before the unit computes: work issued to the COMPUTE stream from now on starts after the gather that
  // recorded `gathered` — and nothing else is waited for, neither on the device nor by the host (no
  // synchronize: it would stop the CPU from issuing the next gathers and kill the overlap).
  //   void Device::wait(Lane lane, const Event& event)          Lane::compute
  void wait_for_unshard(Device& device, const Event& gathered) const override {
    // TODO(task 3)
    todo(3, "ForwardTask::wait_for_unshard");
  }

  // Whether a unit's gathered parameters are freed right after its forward under `strategy`. The root
  // unit (`is_root`) holds the parameters its backward needs first: never freed after forward. Which
  // strategies free after forward: bool reshards_after_forward(ShardingStrategy) in sharding.hpp.
  // Called once per unit when the model is wrapped (before step 1).
  bool reshard_after_forward(ShardingStrategy strategy, bool is_root) const override {
    // TODO(task 3)
    todo(3, "ForwardTask::reshard_after_forward");
  }
};

}  // namespace

const ForwardTask& student_forward() {
  static const StudentForward task;
  return task;
}

}  // namespace fsdplab
