// Events belong to the rank that records them ([Note: an event belongs to one rank], engine/runtime/event.hpp): on
// each device, a second rank's record of one Event is refused, naming the event; waiting for it stays allowed.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace fsdplab
