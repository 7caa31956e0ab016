// nvtx_ranges.hpp — a device's labels as NVTX ranges, so Nsight Systems (`nsys profile -t cuda,nvtx`) shows
// the structure the dashboard shows: the step, phase and unit each kernel ran in.
//
// Labels change flat (set_labels from one phase to the next, a unit's LabelScope inside a phase), not nested
// as NVTX's push/pop would need: so every change ends the open range and starts the next (start/end ranges).
// Domain "fsdplab"; a range's category is its rank ("rank 1"), since ranks are threads of one process, and its
// colour its phase. With no tool attached an NVTX call is a test of a null pointer.
#pragma once
#include <cstdint>
#include <string>

#include "engine/runtime/op.hpp"

namespace fsdplab::cuda {

// "step 3 forward unit 2": the labels that are set, in that order; empty when none is.
std::string nvtx_range_name(const OpLabels& labels);

class NvtxRanges {
 public:
  explicit NvtxRanges(int rank);
  ~NvtxRanges();  // ends the open range
  NvtxRanges(const NvtxRanges&) = delete;
  NvtxRanges& operator=(const NvtxRanges&) = delete;

  // The device's labels are now `labels`: the open range ends, and one named for them starts (none when no
  // label is set).
  void label(const OpLabels& labels);

 private:
  void end();

  std::uint32_t category_;
  bool open_ = false;
  std::uint64_t range_ = 0;  // nvtxRangeId_t of the open range
};

}  // namespace fsdplab::cuda
