// sm_share.hpp — which share of a GPU's streaming multiprocessors a rank's streams run on, for ranks sharing one
// GPU (the cuda device with LocalComm). See [Note: ranks sharing a GPU] in engine/cuda/sm_partition.cpp.
#pragma once

namespace fsdplab {

struct SmShare {
  int index = 0;  // this rank's share, 0 .. count-1
  int count = 1;  // the equal, disjoint shares the SMs are split into; 1: every SM
  // A share the driver cannot make is an Error; otherwise the streams share every SM, and a warning says why.
  bool required = false;

  // The `i`-th of `parts` equal parts of this share: a run's share split between its ranks on the GPU.
  SmShare part(int i, int parts) const { return {index * parts + i, count * parts, required}; }
};

}  // namespace fsdplab
