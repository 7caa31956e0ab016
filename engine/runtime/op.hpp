// op.hpp — what an op tells the device when it is launched, and what the device records of it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/runtime/cost_model.hpp"
#include "engine/trace/trace_event.hpp"

namespace fsdplab {

using BlockId = std::uint64_t;

// A byte range of one memory block that an op reads or writes.
struct Access {
  BlockId block = 0;
  std::int64_t offset = 0;  // bytes from the block's start
  std::int64_t bytes = 0;
};

struct OpSpec {
  std::string name;
  OpCategory category = OpCategory::compute;
  OpCost cost;                     // how long it takes, unless `duration` is set
  SimTime duration = -1;           // set by collectives, whose time comes from the link, not the device
  SimTime not_before = 0;          // set by collectives: the start time agreed between the ranks
  std::int64_t bytes_moved = 0;    // for the trace: bytes a collective or copy moves
  std::vector<Access> reads;
  std::vector<Access> writes;
};

// Labels stamped on every op launched while they are set (see LabelScope in device.hpp).
struct OpLabels {
  int step = -1;
  int unit = -1;
  std::string phase;
};

struct OpRecord {
  OpId id = 0;
  std::string name;
  OpCategory category = OpCategory::compute;
  Lane lane = Lane::compute;
  OpLabels labels;
  SimTime issued = 0;  // host time when the launch call returned
  SimTime begin = 0;
  SimTime end = 0;
  OpCost cost;
  std::int64_t bytes_moved = 0;
  std::vector<OpRef> deps;  // ops it waited for through events
  std::vector<Access> reads;
  std::vector<Access> writes;
};

}  // namespace fsdplab
