// The trainings the GPU tests run (tests/gpu/gpu_runs.hpp), trained here on the sim device on every CI run:
// a GPU machine, borrowed for minutes, must not be the first to find a fixture that cannot run (two GPU tests
// once asked gpt2 test-tiny for 32 tokens; its position table has 16).
#include <gtest/gtest.h>

#include "../gpu/gpu_runs.hpp"
#include "engine/runtime/presets.hpp"

namespace fsdplab {
namespace {

using namespace testing;

void trains_on_sim(RunConfig run) {
  run = on_sim(run);
  run.steps = 1;
  FsdpRun fsdp;
  fsdp.run = run;
  const std::vector<StepReport> steps = train_fsdp(fsdp, PresetCatalog::builtin(), {});
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_TRUE(std::isfinite(steps.front().loss));
}

TEST(GpuTestFixtures, EachTrainsOnTheSimDevice) {
  trains_on_sim(one_gpu_fsdp_run());
  trains_on_sim(cupti_fsdp_run());
  trains_on_sim(nccl_run(1));
  trains_on_sim(nccl_run(2));
}

}  // namespace
}  // namespace fsdplab
