// cost_model.hpp — how long an op takes on the sim device's virtual clock.
//
// Compute: an op is bound either by arithmetic or by memory traffic, so it lasts
//   max(flops / peak, bytes / memory bandwidth), and at least the device's minimum kernel time.
// Collectives over a ring of W ranks (the algorithm NCCL uses for these sizes): each rank sends and
// receives (W-1)/W of the full buffer for all-gather and reduce-scatter, twice that for all-reduce,
// in W-1 steps each paying the link latency:
//   t = (W-1) * latency + factor * full_bytes / bandwidth.
// Bus bandwidth (what nccl-tests prints) is defined from that once, in bus_bandwidth().
#pragma once
#include <cstdint>

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

class CostModel {
 public:
  CostModel(DevicePreset device, LinkPreset link) : device_(std::move(device)), link_(std::move(link)) {}

  SimTime compute(const OpCost& cost) const;
  // A collective of `category` over `world` ranks on a buffer whose full (unsharded) size is `full_bytes`.
  SimTime collective(OpCategory category, std::int64_t full_bytes, int world) const;
  // A copy between host and device memory.
  SimTime host_copy(std::int64_t bytes) const;
  // CPU work (an offloaded optimizer step): bound by the host's arithmetic or its memory bandwidth.
  SimTime host_compute(const OpCost& cost) const;
  SimTime launch_overhead() const;

  const DevicePreset& device() const { return device_; }
  const LinkPreset& link() const { return link_; }

 private:
  DevicePreset device_;
  LinkPreset link_;
};

// The fraction of the full buffer each rank moves in a ring collective.
double ring_traffic_factor(OpCategory category, int world);
// Bus bandwidth from a measured time: algorithm bandwidth (full_bytes / seconds) x ring factor.
double bus_bandwidth(OpCategory category, std::int64_t full_bytes, int world, double seconds);

}  // namespace fsdplab
