// FsdpEventLog (app/dashboard/fsdp_event_log.hpp): the step-through panel's list of a run's events is in the order
// they happened on the ranks' host clocks, whichever order the ranks' threads reported them in, so a paused run
// shows the same list every time.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "app/dashboard/fsdp_event_log.hpp"

namespace fsdplab::app {
namespace {

FsdpEvent at(int rank, SimTime host_time, int unit = -1) {
  FsdpEvent e;
  e.rank = rank;
  e.host_time = host_time;
  e.unit = unit;
  return e;
}

std::vector<std::pair<int, SimTime>> listed(const FsdpEventLog& log) {
  std::vector<std::pair<int, SimTime>> out;
  for (const FsdpEvent& e : log.history(0)) out.emplace_back(e.rank, e.host_time);
  return out;
}

TEST(FsdpEventLog, ListsTheRanksEventsInTheOrderTheyHappenedNotTheOrderTheyCame) {
  // Two arrival orders of the same events: rank 1's thread ran ahead in one, rank 0's in the other.
  const std::vector<FsdpEvent> rank1_first = {at(1, 10), at(1, 20), at(1, 30), at(0, 10), at(0, 20), at(0, 25)};
  const std::vector<FsdpEvent> rank0_first = {at(0, 10), at(0, 20), at(1, 10), at(0, 25), at(1, 20), at(1, 30)};
  const std::vector<std::pair<int, SimTime>> expected = {{0, 10}, {1, 10}, {0, 20}, {1, 20}, {0, 25}, {1, 30}};
  for (const auto& arrivals : {rank1_first, rank0_first}) {
    FsdpEventLog log;
    log.add_source();
    for (const FsdpEvent& e : arrivals) log.add(0, e);
    EXPECT_EQ(listed(log), expected);
    EXPECT_EQ(log.total(0), arrivals.size());
    EXPECT_EQ(log.latest(0, 0)->host_time, 25);  // each rank's latest is the last it reported
    EXPECT_EQ(log.latest(0, 1)->host_time, 30);
  }
}

TEST(FsdpEventLog, KeepsTheLatestEventsOfALongRun) {
  FsdpEventLog log;
  log.add_source();
  const auto n = static_cast<SimTime>(FsdpEventLog::kHistory);
  for (SimTime t = 0; t < n + 10; ++t) log.add(0, at(1, t));
  log.add(0, at(0, 5));  // older than every event kept: it is not listed
  for (SimTime t = 0; t < n + 10; ++t) log.add(0, at(0, t + 6));
  ASSERT_EQ(log.history(0).size(), FsdpEventLog::kHistory);
  EXPECT_EQ(log.total(0), 2 * (FsdpEventLog::kHistory + 10) + 1);
  EXPECT_EQ(log.history(0).back().host_time, n + 15);
  EXPECT_EQ(log.history(0).back().rank, 0);
  for (std::size_t i = 1; i < log.history(0).size(); ++i)
    EXPECT_LE(log.history(0)[i - 1].host_time, log.history(0)[i].host_time) << "at " << i;
}

}  // namespace
}  // namespace fsdplab::app
