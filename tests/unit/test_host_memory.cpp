// Pinned host memory and CPU work on the sim device (CPU offload): host allocations are counted in the
// host ledger and never against the device's; device kernels refuse host tensors and host ops device
// tensors; the host<->device copies run on a stream for bytes / host bandwidth; a host op holds the
// host's cursor for its duration and is ordered for the race detector like any host access.
#include <gtest/gtest.h>

#include "engine/tensor/elementwise.hpp"
#include "engine/tensor/host_copy.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::contains;
using testing::error_of;
using testing::make_sim_device;

TEST(HostMemory, CountedInTheHostLedgerOnly) {
  auto device = make_sim_device();
  const Tensor host = Tensor::empty(*device, {1000}, DType::f32, MemTag::optim_state, "m", Lane::host);
  EXPECT_EQ(device->host_ledger().live(MemTag::optim_state), 4000);
  EXPECT_EQ(device->ledger().live(MemTag::optim_state), 0);
  EXPECT_EQ(device->ledger().live_total(), 0);
}

TEST(HostMemory, KernelsAndHostOpsStayOnTheirSide) {
  auto device = make_sim_device();
  const Tensor host = Tensor::empty(*device, {8}, DType::f32, MemTag::param_shard, "master", Lane::host);
  const Tensor dev = Tensor::empty(*device, {8}, DType::f32, MemTag::activation, "x");
  const std::string kernel = error_of([&] { fill(device->stream(Lane::compute), host, 1); });
  EXPECT_TRUE(contains(kernel, "'master' [8] f32 is in host memory but the op runs on stream compute")) << kernel;
  const std::string cpu = error_of([&] { fill(device->stream(Lane::host), dev, 1); });
  EXPECT_TRUE(contains(cpu, "is in device memory but the op runs on the host")) << cpu;
  const std::string wrong_way = error_of([&] { copy_to_host(device->stream(Lane::memcpy), host, dev); });
  EXPECT_TRUE(contains(wrong_way, "must be in device memory")) << wrong_way;
}

TEST(HostMemory, CopiesTakeTheHostLinkAndCarryValues) {
  auto device = make_sim_device();
  const Tensor host = Tensor::empty(*device, {1 << 20}, DType::f32, MemTag::param_shard, "master", Lane::host);
  const Tensor dev = Tensor::empty(*device, {1 << 20}, DType::f32, MemTag::comm_buffer, "copy", Lane::memcpy);
  const Tensor back = Tensor::empty(*device, {1 << 20}, DType::f32, MemTag::grad_shard, "grad", Lane::host);
  fill(device->stream(Lane::host), host, 3.5f);
  copy_to_device(device->stream(Lane::memcpy), host, dev);
  copy_to_host(device->stream(Lane::memcpy), dev, back);
  device->synchronize();
  const std::vector<OpRecord>& ops = device->ops();
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0].lane, Lane::host);
  EXPECT_EQ(ops[0].end - ops[0].begin, device->cost_model().host_compute(ops[0].cost));
  for (std::size_t i : {1u, 2u}) {
    EXPECT_EQ(ops[i].lane, Lane::memcpy);
    EXPECT_EQ(ops[i].category, OpCategory::memcpy);
    EXPECT_EQ(ops[i].end - ops[i].begin, device->cost_model().host_copy(4 << 20));
  }
  EXPECT_GE(ops[1].begin, ops[0].end) << "the copy reads what the host op wrote";
  for (float v : back.to_vector()) ASSERT_EQ(v, 3.5f);
}

TEST(HostMemory, HostOpsHoldTheHost) {
  auto device = make_sim_device();
  const Tensor host = Tensor::empty(*device, {1 << 20}, DType::f32, MemTag::optim_state, "v", Lane::host);
  const SimTime before = device->host_time();
  fill(device->stream(Lane::host), host, 0);
  EXPECT_EQ(device->host_time() - before, device->ops().back().end - device->ops().back().begin);
  EXPECT_GT(device->host_time(), before);
}

}  // namespace
}  // namespace fsdplab
