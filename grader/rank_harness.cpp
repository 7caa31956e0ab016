#include "grader/rank_harness.hpp"

#include <algorithm>

#include "engine/runtime/presets.hpp"
#include "engine/train/world.hpp"

namespace fsdplab::grading {

std::unique_ptr<SimDevice> make_graded_device(int rank, bool dry_run, RaceDetector::Policy races) {
  const PresetCatalog& presets = PresetCatalog::builtin();
  SimDeviceOptions options;
  options.dry_run = dry_run;
  options.races = races;
  return std::make_unique<SimDevice>(rank, presets.device("h100-sxm"), presets.link("nvlink4"), options);
}

CheckOutcome first_failure(const RankFindings& found) {
  for (const CheckOutcome& o : found)
    if (!o.passed()) return o;
  return CheckOutcome::pass();
}

std::vector<OpRecord> ops_since(const Device& device, std::size_t first) {
  return {device.ops().begin() + static_cast<std::ptrdiff_t>(first), device.ops().end()};
}

const OpRecord* first_of(const std::vector<OpRecord>& ops, OpCategory category) {
  const auto it = std::find_if(ops.begin(), ops.end(), [&](const OpRecord& op) { return op.category == category; });
  return it == ops.end() ? nullptr : &*it;
}

int count_of(const std::vector<OpRecord>& ops, OpCategory category) {
  return static_cast<int>(
      std::count_if(ops.begin(), ops.end(), [&](const OpRecord& op) { return op.category == category; }));
}

OpRecord busy_op(Device& device, Lane lane, OpCategory category, std::string name, SimTime duration) {
  OpSpec spec;
  spec.name = std::move(name);
  spec.category = category;
  spec.duration = duration;
  return device.op(device.launch(lane, std::move(spec), {.host = [] {}}));
}

bool waited_for(const OpRecord& op, OpId id) {
  return std::any_of(op.deps.begin(), op.deps.end(),
                     [&](const OpRef& dep) { return dep.op == id && dep.reason == WaitReason::event; });
}

std::set<Lane> lanes_waited_for(const OpRecord& op, const std::vector<OpRecord>& issued) {
  std::set<Lane> lanes;
  for (const OpRecord& work : issued)
    if (waited_for(op, work.id)) lanes.insert(work.lane);
  return lanes;
}

bool intersects(const OpRecord& a, const OpRecord& b) { return a.begin < b.end && b.begin < a.end; }

int issued_on_an_idle_device(const std::vector<OpRecord>& ops, std::optional<int> step) {
  SimTime ended = -1;
  int idle = 0;
  for (const OpRecord& op : ops) {
    if ((!step || op.labels.step == *step) && ended >= 0 && op.issued >= ended) ++idle;
    ended = std::max(ended, op.end);
  }
  return idle;
}

void on_ranks(int world, const std::function<void(GradedRank&)>& body, RaceDetector::Policy races) {
  run_world(world, [&](int r, LocalWorld& local) {
    auto device = make_graded_device(r, /*dry_run=*/false, races);
    LocalComm comm(local, r, *device);
    GradedRank rank{r, world, *device, comm};
    body(rank);
    device->synchronize();
  });
}

}  // namespace fsdplab::grading
