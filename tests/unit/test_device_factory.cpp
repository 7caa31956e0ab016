// Choosing a rank's device: auto, sim and cuda resolved on this machine, and the refusals that say why.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "engine/runtime/device_factory.hpp"
#include "engine/train/run_device.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using namespace testing;

TEST(DeviceFactory, AutoIsCudaExactlyWhereAGpuIsUsable) {
  EXPECT_EQ(resolve_device("auto", false), cuda_unavailable() ? DeviceKind::sim : DeviceKind::cuda);
  EXPECT_EQ(resolve_device("sim", false), DeviceKind::sim);
}

TEST(DeviceFactory, ADryRunIsAlwaysOnTheSimDevice) {
  EXPECT_EQ(resolve_device("auto", true), DeviceKind::sim);
  EXPECT_TRUE(contains(error_of([] { resolve_device("cuda", true); }),
                       "a dry run plans shapes, time and memory on the sim device"));
}

TEST(DeviceFactory, AnUnknownDeviceListsTheChoices) {
  EXPECT_TRUE(contains(error_of([] { resolve_device("tpu", false); }), "--device 'tpu'; expected auto, sim or cuda"));
}

// --sm-split: auto splits where the driver can, on splits or fails, off shares every SM; the run's device
// spec carries the choice to each rank's cuda device (its seat adds which share).
TEST(DeviceFactory, SmSplitChoicesReachTheDeviceSpec) {
  RunConfig run;
  for (const auto& [choice, split, required] : {std::tuple{"auto", true, false}, std::tuple{"on", true, true},
                                                std::tuple{"off", false, false}}) {
    set_sm_split(run, choice);
    const DeviceSpec spec = run_device_spec(run, PresetCatalog::builtin(), false);
    EXPECT_EQ(spec.sm_split, split) << choice;
    EXPECT_EQ(spec.sm.required, required) << choice;
  }
  EXPECT_TRUE(contains(error_of([&] { set_sm_split(run, "half"); }), "--sm-split 'half'; expected auto, on or off"));
}

// Two runs of two ranks on one GPU (the dashboard's SYNC and ASYNC): four disjoint shares, one per rank of each
// run, where each run taking shares 0 and 1 would put two ranks on the same SMs.
TEST(DeviceFactory, EveryRankOfRunsSideBySideGetsItsOwnSmShare) {
  std::set<int> shares;
  for (int run_index : {0, 1}) {
    RunConfig run;
    run.runs_on_gpu = 2;
    run.run_index_on_gpu = run_index;
    set_sm_split(run, "on");
    const DeviceSpec spec = run_device_spec(run, PresetCatalog::builtin(), false);
    for (int rank : {0, 1}) {
      const SmShare share = spec.sm.part(rank, 2);
      EXPECT_EQ(share.count, 4);
      EXPECT_TRUE(share.required);
      shares.insert(share.index);
    }
  }
  EXPECT_EQ(shares, (std::set<int>{0, 1, 2, 3}));
  RunConfig alone;
  EXPECT_EQ(run_device_spec(alone, PresetCatalog::builtin(), false).sm.part(1, 2).index, 1) << "one run: share = rank";
  alone.run_index_on_gpu = 1;
  EXPECT_TRUE(contains(error_of([&] { run_device_spec(alone, PresetCatalog::builtin(), false); }),
                       "run 1 of 1 sharing the GPU; expected 0 <= run < runs"));
}

TEST(DeviceFactory, CudaWithoutAGpuSaysWhyAndPointsToSim) {
  const auto why = cuda_unavailable();
  if (!why) GTEST_SKIP() << "this machine has a usable GPU";
  const std::string message = error_of([] { resolve_device("cuda", false); });
  EXPECT_TRUE(contains(message, "--device cuda: " + *why)) << message;
  EXPECT_TRUE(contains(message, "use --device sim")) << message;
  DeviceSpec spec;
  spec.kind = DeviceKind::cuda;
  EXPECT_TRUE(contains(error_of([&] { make_device(2, spec); }), "rank 2: cannot use the cuda device")) << message;
}

TEST(DeviceFactory, TheSimDeviceIsMadeFromTheSpec) {
  const auto& presets = PresetCatalog::builtin();
  DeviceSpec spec;
  spec.preset = presets.device("rtx-4090");
  spec.link = presets.link("pcie4-no-p2p");
  spec.dry_run = true;
  const auto dev = make_device(5, spec);
  EXPECT_EQ(dev->kind(), DeviceKind::sim);
  EXPECT_EQ(dev->rank(), 5);
  EXPECT_TRUE(dev->dry_run());
  EXPECT_EQ(dev->cost_model().device().name, "rtx-4090");
  EXPECT_EQ(dev->cost_model().link().name, "pcie4-no-p2p");
}

TEST(RunDevice, FlagsThatOnlyTheCudaDeviceTakesAreRefusedOnSim) {
  RunConfig run;
  run.device = "sim";
  run.emulate_link = true;
  EXPECT_TRUE(contains(error_of([&] { run_device_spec(run, PresetCatalog::builtin(), false); }),
                       "--emulate-link holds a real GPU's collective streams"));
  run.emulate_link = false;
  run.gpu = 1;
  EXPECT_TRUE(contains(error_of([&] { run_device_spec(run, PresetCatalog::builtin(), false); }),
                       "--gpu 1 picks a GPU for the cuda device"));
}

}  // namespace
}  // namespace fsdplab
