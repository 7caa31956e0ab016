// The memory ledger (live and peak bytes per tag, the breakdown at the peak, the time series) and
// the sim allocator that feeds it.
#include <gtest/gtest.h>

#include <vector>

#include "engine/runtime/error.hpp"
#include "engine/runtime/race_detector.hpp"
#include "engine/tensor/host_copy.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::make_sim_device;

TEST(RuntimeMemory, LedgerTracksLiveAndPeakPerTag) {
  MemoryLedger ledger;
  ledger.on_alloc(MemTag::param_shard, 100, 0);
  ledger.on_alloc(MemTag::param_full, 400, 10);
  ledger.on_alloc(MemTag::activation, 50, 20);
  ledger.on_free(MemTag::param_full, 400, 30);
  ledger.on_alloc(MemTag::grad_full, 300, 40);
  EXPECT_EQ(ledger.live(MemTag::param_full), 0);
  EXPECT_EQ(ledger.peak(MemTag::param_full), 400);
  EXPECT_EQ(ledger.live_total(), 450);
  EXPECT_EQ(ledger.peak_total(), 550);
  EXPECT_EQ(ledger.peak_time(), 20);
  // At the peak the full parameters were live and the full gradient was not.
  EXPECT_EQ(ledger.breakdown_at_peak()[static_cast<std::size_t>(MemTag::param_full)], 400);
  EXPECT_EQ(ledger.breakdown_at_peak()[static_cast<std::size_t>(MemTag::grad_full)], 0);
  ASSERT_EQ(ledger.series().size(), 5u);
  EXPECT_EQ(ledger.series()[3].delta, -400);
  EXPECT_EQ(ledger.series()[3].total_live, 150);
}

TEST(RuntimeMemory, FreeingMoreThanLiveIsAnError) {
  MemoryLedger ledger;
  ledger.on_alloc(MemTag::grad_shard, 10, 0);
  EXPECT_THROW(ledger.on_free(MemTag::grad_shard, 11, 1), Error);
  EXPECT_THROW(ledger.on_free(MemTag::optim_state, 1, 1), Error);
}

TEST(RuntimeMemory, ResetPeaksKeepsLiveBytes) {
  MemoryLedger ledger;
  ledger.on_alloc(MemTag::activation, 1000, 0);
  ledger.on_free(MemTag::activation, 1000, 1);
  ledger.on_alloc(MemTag::param_shard, 10, 2);
  ledger.reset_peaks();
  EXPECT_EQ(ledger.peak_total(), 10);
  EXPECT_EQ(ledger.peak(MemTag::activation), 0);
}

TEST(RuntimeMemory, TensorsFeedTheLedgerOfTheirDevice) {
  auto dev = make_sim_device();
  {
    Tensor a = Tensor::empty(*dev, {256, 4}, DType::f32, MemTag::activation);
    Tensor b = Tensor::empty(*dev, {1000}, DType::bf16, MemTag::param_full);
    EXPECT_EQ(dev->ledger().live(MemTag::activation), 4096);
    EXPECT_EQ(dev->ledger().live(MemTag::param_full), 2000);
    Tensor view = a.rows(10, 5);  // views take no memory
    EXPECT_EQ(dev->ledger().live_total(), 6096);
  }
  EXPECT_EQ(dev->ledger().live_total(), 0);
  EXPECT_EQ(dev->ledger().peak_total(), 6096);
}

TEST(RuntimeMemory, StorageCanFreeAndAllocateAgainUnderItsViews) {
  auto dev = make_sim_device();
  auto flat = std::make_shared<Storage>(*dev, 64, MemTag::param_full, "flat");
  const Tensor w = Tensor::view_of(flat, 4, {4}, DType::f32, "fc.weight");
  flat->free();
  EXPECT_EQ(dev->ledger().live(MemTag::param_full), 0);
  EXPECT_FALSE(w.has_data());
  EXPECT_THROW(w.f32(), Error);
  flat->allocate();
  EXPECT_TRUE(w.has_data());
  EXPECT_EQ(dev->ledger().live(MemTag::param_full), 64);
}

TEST(RuntimeMemory, OutOfMemoryNamesRankTagAndSizes) {
  auto dev = make_sim_device(3);
  try {
    Tensor huge = Tensor::empty(*dev, {int64_t{100'000'000'000}}, DType::f32, MemTag::optim_state);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 3"), std::string::npos) << m;
    EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("optim_state"), std::string::npos) << m;
  }
}

TEST(RuntimeMemory, DryRunKeepsMemoryButNoData) {
  auto dev = make_sim_device(0, {.dry_run = true});
  Tensor t = Tensor::empty(*dev, {1 << 20}, DType::f32, MemTag::param_shard, "big");
  EXPECT_EQ(dev->ledger().live(MemTag::param_shard), 4 << 20);
  EXPECT_FALSE(t.has_data());
  EXPECT_THROW(t.f32(), Error);
}

// Device memory is the device's: the host touches it through copy_from and to_vector, an op's body through its
// pointers. A raw pointer asked for on the host is refused as a GPU would fault; pinned host memory is the host's.
TEST(RuntimeMemory, ARawPointerIntoDeviceMemoryIsForOpBodiesOnly) {
  auto device = make_sim_device();
  const Tensor shard = Tensor::empty(*device, {4}, DType::f32, MemTag::param_shard, "shard");
  try {
    shard.f32()[0] = 1.0f;
    ADD_FAILURE() << "a raw pointer into device memory handed to the host";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a raw pointer into storage 'shard', device memory, asked for outside an op"),
              std::string::npos)
        << e.what();
  }
  shard.copy_from(std::vector<float>{1, 2, 3, 4});  // the host's way in
  float seen = 0;
  OpSpec spec;
  spec.name = "read";
  spec.reads = {shard.access()};
  device->launch(Lane::compute, std::move(spec), {.host = [&] { seen = shard.f32()[2]; }});
  EXPECT_EQ(seen, 3.0f);
  EXPECT_NE(shard.device_address(), nullptr);  // an address for a peer's op, not dereferenced here
  // Pinned host memory too: a copy on the memcpy stream may still read or write it, and a raw pointer passes no check.
  const Tensor pinned = Tensor::empty(*device, {4}, DType::f32, MemTag::param_shard, "pinned", Lane::host);
  try {
    pinned.f32()[0] = 1.0f;
    ADD_FAILURE() << "a raw pointer into pinned host memory handed to the host outside an op";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("a raw pointer into storage 'pinned', pinned host memory, asked for outside an "
                                   "op: a copy to or from the device may still be using it"),
        std::string::npos)
        << e.what();
  }
  pinned.copy_from(std::vector<float>{1, 2, 3, 4});  // the host's way in, checked
  device->synchronize();
}

// The checked way in finds what a raw pointer would not: the host reading a copy's destination before the copy is
// done (PyTorch's non_blocking=True pitfall).
TEST(RuntimeMemory, ReadingACopysDestinationBeforeItIsDoneIsARace) {
  auto device = make_sim_device();
  const Tensor on_device = Tensor::empty(*device, {256}, DType::f32, MemTag::grad_shard, "device_grad");
  const Tensor pinned = Tensor::empty(*device, {256}, DType::f32, MemTag::grad_shard, "host_grad", Lane::host);
  on_device.copy_from(std::vector<float>(256, 1.0f));
  copy_to_host(device->stream(Lane::memcpy), on_device, pinned);
  EXPECT_THROW(pinned.to_vector(), RaceError);
  device->synchronize();
  EXPECT_EQ(pinned.to_vector(), std::vector<float>(256, 1.0f));
}

TEST(RuntimeMemory, MetaTensorHasShapeOnly) {
  Tensor m = Tensor::meta({3, 4}, DType::bf16, "wte");
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(m.numel(), 12);
  EXPECT_EQ(m.nbytes(), 24);
  try {
    (void)m.bf16();
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("meta"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(m.view(4, {2, 4}).is_meta());
}

// Error messages name their tensors with describe(); a default-constructed Tensor names itself too, so a caller
// never has to ask defined() first.
TEST(RuntimeMemory, DescribeNamesShapeDtypeOrUndefined) {
  EXPECT_EQ(Tensor::meta({3, 4}, DType::bf16, "wte").describe(), "'wte' [3, 4] bf16 (meta)");
  EXPECT_EQ(Tensor{}.describe(), "an undefined tensor");
}

TEST(RuntimeMemory, ViewsShareStorage) {
  auto dev = make_sim_device();
  Tensor flat = Tensor::empty(*dev, {10}, DType::f32, MemTag::param_full);
  std::vector<float> values(10, 0.f);
  flat.copy_from(values);
  Tensor w = flat.view(2, {2, 3});
  std::vector<float> row(6, 0.f);
  row[4] = 7.f;  // element (1, 1) of the view is element 2 + 4 of the flat buffer
  w.copy_from(row);
  EXPECT_EQ(flat.to_vector()[6], 7.f);
  EXPECT_THROW(flat.view(8, {3}), Error);
  EXPECT_THROW(flat.reshape({3, 3}), Error);
}

}  // namespace
}  // namespace fsdplab
