#include <gtest/gtest.h>
#include "engine/runtime/sim_device.hpp"
#include "engine/tensor/launch.hpp"
TEST(Build, Links) {
  auto& c = fsdplab::PresetCatalog::builtin();
  fsdplab::SimDevice d(0, c.device("h100-sxm"), c.link("nvlink4"));
  auto t = fsdplab::Tensor::empty(d, {2, 3}, fsdplab::DType::f32, fsdplab::MemTag::activation, "x");
  EXPECT_EQ(t.numel(), 6);
}
