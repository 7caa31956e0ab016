// cost_model.hpp — how long an op takes on the sim device's virtual clock, and how long the cuda device holds
// a collective's stream where it emulates a slower link than the GPU's own (--emulate-link).
//
// Compute: an op is bound either by arithmetic or by memory traffic, so it lasts
//   max(flops / peak, bytes / memory bandwidth), and at least the device's minimum kernel time.
// Collectives over a ring of W ranks (the algorithm NCCL uses for these sizes): each rank sends and
// receives (W-1)/W of the full buffer for all-gather and reduce-scatter, twice that for all-reduce,
// in W-1 steps each paying the link latency:
//   t = (W-1) * latency + factor * full_bytes / bandwidth.
// Bus bandwidth (what nccl-tests prints) is defined from that once, in bus_bandwidth().
// On several nodes (NodeLayout) a ring within a node runs on the device's link, and one that spans nodes at
// the pace of its slowest hops, the inter-node link's: its bandwidth and its latency in the formula above.
// The two are separate links of the rank (RankLink): NVLink and the node's network card carry collectives at
// the same time.
#pragma once
#include <cstdint>
#include <span>

#include "engine/runtime/dtype.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/runtime/sim_time.hpp"
#include "engine/trace/trace_event.hpp"

namespace fsdplab {

// What an op costs, stated by the op itself.
struct OpCost {
  double flops = 0;
  double bytes = 0;       // bytes read plus bytes written
  DType dtype = DType::f32;
  bool matmul = false;    // a GEMM runs at the matmul peak of its dtype; everything else at vector peak
};

// Where the ranks sit: nodes of `ranks_per_node` consecutive world ranks, the ranks of a node joined by the
// device's link, the nodes by `inter_node` links. 0 ranks per node: one node holds every rank (`inter_node`
// unused), as on a workstation or a single server.
struct NodeLayout {
  int ranks_per_node = 0;
  LinkPreset inter_node;
  int node_of(int rank) const { return ranks_per_node > 0 ? rank / ranks_per_node : 0; }
};

class CostModel {
 public:
  CostModel(DevicePreset device, LinkPreset link, NodeLayout nodes = {});

  SimTime compute(const OpCost& cost) const;
  // A collective of `category` over `world` ranks on a buffer whose full (unsharded) size is `full_bytes`, on
  // `link`: a communicator's group takes link_of(its members); one that does not know where its ranks sit
  // (NCCL's, whose nodes are the machine's own) takes the link within a node.
  SimTime collective(OpCategory category, std::int64_t full_bytes, int world, RankLink link = RankLink::in_node) const;
  // The link a collective over `members` takes (RankLink, trace_event.hpp): in_node where they share a node.
  RankLink link_of(std::span<const int> members) const;
  // That link's preset: the device's link, or the inter-node link.
  const LinkPreset& preset_of(RankLink link) const;
  // A copy between host and device memory.
  SimTime host_copy(std::int64_t bytes) const;
  // CPU work (an offloaded optimizer step): bound by the host's arithmetic or its memory bandwidth.
  SimTime host_compute(const OpCost& cost) const;
  SimTime launch_overhead() const;

  const DevicePreset& device() const { return device_; }
  const LinkPreset& link() const { return link_; }

 private:
  SimTime ring(OpCategory category, std::int64_t full_bytes, int world, const LinkPreset& link) const;

  DevicePreset device_;
  LinkPreset link_;
  NodeLayout nodes_;
};

// The fraction of the full buffer each rank moves in a ring collective.
double ring_traffic_factor(OpCategory category, int world);
// Bus bandwidth from a measured time: algorithm bandwidth (full_bytes / seconds) x ring factor.
double bus_bandwidth(OpCategory category, std::int64_t full_bytes, int world, double seconds);

}  // namespace fsdplab
