#include "engine/runtime/cost_model.hpp"

#include <algorithm>

#include "engine/runtime/error.hpp"

namespace fsdplab {

CostModel::CostModel(DevicePreset device, LinkPreset link, NodeLayout nodes)
    : device_(std::move(device)), link_(std::move(link)), nodes_(std::move(nodes)) {
  check(nodes_.ranks_per_node >= 0, "cost model: ", nodes_.ranks_per_node, " ranks per node; expected >= 1, or 0 "
        "for one node");
  check(nodes_.ranks_per_node == 0 || (nodes_.inter_node.bandwidth > 0 && nodes_.inter_node.latency_us >= 0),
        "cost model: nodes of ", nodes_.ranks_per_node, " ranks need an inter-node link with a bandwidth, got '",
        nodes_.inter_node.name, "'");
}

SimTime CostModel::compute(const OpCost& cost) const {
  check(cost.flops >= 0 && cost.bytes >= 0, "cost model: an op states negative work (flops ", cost.flops,
        ", bytes ", cost.bytes, ")");
  const double peak = cost.matmul ? device_.matmul_flops(cost.dtype) : device_.vector_flops;
  const double seconds = std::max({cost.flops / peak, cost.bytes / device_.memory_bandwidth,
                                   device_.min_kernel_us * 1e-6});
  return seconds_to_ns(seconds);
}

double ring_traffic_factor(OpCategory category, int world) {
  check(world >= 1, "ring collective over ", world, " ranks; expected at least 1");
  const double w = world;
  switch (category) {
    case OpCategory::all_gather:
    case OpCategory::reduce_scatter:
      return (w - 1) / w;
    case OpCategory::all_reduce:
      return 2 * (w - 1) / w;
    case OpCategory::broadcast:
      return world > 1 ? 1.0 : 0.0;  // pipelined ring broadcast: every rank receives the whole buffer once
    default:
      fail("ring_traffic_factor: '", category_name(category), "' is not a collective");
  }
}

SimTime CostModel::ring(OpCategory category, std::int64_t full_bytes, int world, const LinkPreset& link) const {
  check(full_bytes >= 0, "collective of ", full_bytes, " bytes; expected >= 0");
  if (world == 1) return seconds_to_ns(device_.min_kernel_us * 1e-6);  // a local copy at most
  const double seconds = (world - 1) * link.latency_us * 1e-6 +
                         ring_traffic_factor(category, world) * static_cast<double>(full_bytes) / link.bandwidth;
  return seconds_to_ns(seconds);
}

RankLink CostModel::link_of(std::span<const int> members) const {
  for (int rank : members)
    if (nodes_.node_of(rank) != nodes_.node_of(members.front())) return RankLink::between_nodes;
  return RankLink::in_node;
}

const LinkPreset& CostModel::preset_of(RankLink link) const {
  return link == RankLink::between_nodes ? nodes_.inter_node : link_;
}

SimTime CostModel::collective(OpCategory category, std::int64_t full_bytes, int world, RankLink link) const {
  return ring(category, full_bytes, world, preset_of(link));
}

SimTime CostModel::host_copy(std::int64_t bytes) const {
  return seconds_to_ns(std::max(static_cast<double>(bytes) / device_.host_bandwidth, device_.min_kernel_us * 1e-6));
}

// The host's figures are stated assumptions, not a preset's: one rank's share of a server CPU, about
// 8 cores of AVX-512 f32 (~0.5 TFLOP/s) and an eighth of a two-socket node's ~300 GB/s of DDR5, so a
// CPU AdamW step (memory-bound: about 28 bytes read and written per element) runs at ~1.3 G elements/s.
constexpr double kHostFlops = 0.5e12;
constexpr double kHostMemoryBandwidth = 37.5e9;

SimTime CostModel::host_compute(const OpCost& cost) const {
  return seconds_to_ns(std::max(cost.flops / kHostFlops, cost.bytes / kHostMemoryBandwidth));
}

SimTime CostModel::launch_overhead() const { return seconds_to_ns(device_.launch_overhead_us * 1e-6); }

double bus_bandwidth(OpCategory category, std::int64_t full_bytes, int world, double seconds) {
  check(seconds > 0, "bus_bandwidth: time must be > 0, got ", seconds);
  return static_cast<double>(full_bytes) / seconds * ring_traffic_factor(category, world);
}

}  // namespace fsdplab
