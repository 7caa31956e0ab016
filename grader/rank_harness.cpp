#include "grader/rank_harness.hpp"

#include "engine/runtime/presets.hpp"
#include "engine/train/world.hpp"

namespace fsdplab::grading {

std::unique_ptr<SimDevice> make_graded_device(int rank, bool dry_run) {
  const PresetCatalog& presets = PresetCatalog::builtin();
  SimDeviceOptions options;
  options.dry_run = dry_run;
  return std::make_unique<SimDevice>(rank, presets.device("h100-sxm"), presets.link("nvlink4"), options);
}

void on_ranks(int world, const std::function<void(GradedRank&)>& body) {
  run_world(world, [&](int r, LocalWorld& local) {
    auto device = make_graded_device(r);
    LocalComm comm(local, r, *device);
    GradedRank rank{r, world, *device, comm};
    body(rank);
    device->synchronize();
  });
}

}  // namespace fsdplab::grading
