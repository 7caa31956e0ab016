// Events on each device. They belong to the rank that records them ([Note: an event belongs to one rank],
// engine/runtime/event.hpp): a second rank's record of one Event is refused, naming the event; waiting for it stays
// allowed. And a loop polling one ends when its work does.
#include <gtest/gtest.h>

#include <chrono>

#include "engine/runtime/error.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::contains;

class Events : public testing::OnEachDevice {};
FSDPLAB_ON_EACH_DEVICE(Events);

TEST_P(Events, AnEventTwoRanksRecordIsRefused) {
  auto rank0 = device(0);
  auto rank1 = device(1);
  Event shared("shared last use");
  rank0->record(shared, Lane::compute);
  rank1->wait(Lane::all_gather, shared);  // another rank's event orders time: allowed
  try {
    rank1->record(shared, Lane::compute);
    FAIL() << "rank 1 recorded the event rank 0 recorded";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "rank 1: event 'shared last use' was recorded by another rank before")) << e.what();
    EXPECT_TRUE(contains(e.what(), "make one per rank")) << e.what();
  }
  EXPECT_EQ(shared.rank(), 0);              // the refused record changed nothing
  rank0->record(shared, Lane::all_gather);  // its own rank records it again
  EXPECT_EQ(shared.lane(), Lane::all_gather);
  rank0->synchronize();
  rank1->synchronize();
}

// A loop polling an event ends once its work is done, and the host then reads what the work wrote: on a GPU because
// the GPU's clock runs on its own, on the sim device because it takes a question asked again and again at one host
// time for a spin ([Note: a host that polls an event], sim_device.cpp).
TEST_P(Events, ALoopPollingAnEventEndsWhenItsWorkDoes) {
  auto dev = device();
  Tensor filled = Tensor::empty(*dev, {1 << 20}, DType::f32, MemTag::activation, "filled");
  fill(dev->stream(Lane::compute), filled, 3.0f);
  Event done("filled");
  dev->record(done, Lane::compute);
  // Bounded by the wall clock only so that a failure cannot hang the suite: a GPU does this fill in microseconds.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool completed = false;
  while (!(completed = dev->completed(done)) && std::chrono::steady_clock::now() < give_up) {
  }
  ASSERT_TRUE(completed) << "the poll never saw the fill done";
  const std::vector<float> values = filled.to_vector();
  EXPECT_EQ(values.front(), 3.0f);
  EXPECT_EQ(values.back(), 3.0f);
}

}  // namespace
}  // namespace fsdplab
