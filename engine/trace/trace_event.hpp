// trace_event.hpp — what every source of timing (the sim clock, CUDA events, CUPTI, host markers)
// produces and every sink (the dashboard's queue, the Chrome trace, the metrics) consumes.
//
// Plain data with no dependency beyond the runtime's small enums, so the runtime can emit events
// without knowing who listens.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runtime/mem_tag.hpp"
#include "engine/runtime/sim_time.hpp"

namespace fsdplab {

// Where an event is drawn: one lane per stream of a rank, plus the host thread that issues work.
enum class Lane { compute, all_gather, reduce_scatter, memcpy, host };
constexpr std::size_t kLaneCount = 5;
constexpr std::size_t kStreamCount = 4;  // the lanes before `host` are device streams
constexpr std::array<Lane, kLaneCount> kAllLanes = {Lane::compute, Lane::all_gather, Lane::reduce_scatter,
                                                    Lane::memcpy, Lane::host};
constexpr std::string_view lane_name(Lane l) {
  constexpr std::array<std::string_view, kLaneCount> names = {"compute", "all_gather", "reduce_scatter",
                                                              "memcpy", "host"};
  return names[static_cast<std::size_t>(l)];
}
constexpr std::size_t lane_index(Lane l) { return static_cast<std::size_t>(l); }

// What an event does. Distinct from the lane: in the streams demo's SYNC step an all-gather runs on the compute
// stream.
enum class OpCategory { compute, all_gather, reduce_scatter, all_reduce, broadcast, memcpy, host };
constexpr std::size_t kOpCategoryCount = 7;
constexpr std::string_view category_name(OpCategory c) {
  constexpr std::array<std::string_view, kOpCategoryCount> names = {
      "compute", "all_gather", "reduce_scatter", "all_reduce", "broadcast", "memcpy", "host"};
  return names[static_cast<std::size_t>(c)];
}
constexpr bool is_communication(OpCategory c) {
  return c == OpCategory::all_gather || c == OpCategory::reduce_scatter || c == OpCategory::all_reduce ||
         c == OpCategory::broadcast;
}

// Which of a rank's links a collective takes on the sim device: the device's link to the ranks of its node, or
// the network to the other nodes, where the collective's group spans nodes (--ranks-per-node). Each carries one
// collective at a time (sim_device.hpp); on one node every collective takes in_node.
enum class RankLink { in_node, between_nodes };
constexpr std::size_t kRankLinkCount = 2;
constexpr std::string_view rank_link_name(RankLink l) { return l == RankLink::in_node ? "in_node" : "between_nodes"; }

using OpId = std::uint64_t;

// How an op came to wait for another (an OpRef among its dependencies).
enum class WaitReason : std::uint8_t {
  event,        // the program's own wait: its stream waited for an event recorded after the op (Device::wait)
  freed_block,  // the caching allocator's: the stream was handed a block freed after the op on another stream
                // (see [Note: a block that crosses streams], sim_device.cpp); no wait of the program's
};
constexpr std::size_t kWaitReasonCount = 2;
constexpr std::string_view wait_reason_name(WaitReason r) { return r == WaitReason::event ? "event" : "freed_block"; }

// An op on another (or the same) rank; as a dependency, one that an op waited for, and why.
struct OpRef {
  int rank = -1;
  OpId op = 0;
  WaitReason reason = WaitReason::event;
  friend bool operator==(const OpRef&, const OpRef&) = default;
};

struct TraceEvent {
  int rank = 0;
  Lane lane = Lane::compute;
  std::string name;
  OpCategory category = OpCategory::compute;
  int step = -1;       // training step, -1 outside one
  int unit = -1;       // FSDP unit, -1 when the op belongs to none
  std::string phase;   // e.g. "forward", "backward", "optimizer"; empty when unlabelled
  SimTime begin = 0;
  SimTime end = 0;
  std::int64_t bytes = 0;  // bytes moved (collectives, copies) or touched (compute)
  double flops = 0;
  OpId op = 0;              // the op's id on its rank, 0 for host markers
  std::vector<OpRef> deps;  // what it waited for
  RankLink link = RankLink::in_node;  // collectives: the rank's link it took
};

// A memory-ledger change, as a counter track.
struct CounterSample {
  int rank = 0;
  SimTime time = 0;
  MemTag tag = MemTag::workspace;
  std::int64_t tag_live = 0;
  std::int64_t total_live = 0;
};

class TraceSink {
 public:
  virtual ~TraceSink() = default;
  virtual void on_event(const TraceEvent& event) = 0;
  virtual void on_counter(const CounterSample& sample) = 0;
};

}  // namespace fsdplab
