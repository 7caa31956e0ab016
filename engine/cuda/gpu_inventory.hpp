// gpu_inventory.hpp — which CUDA GPUs this process can use, asked without a context and without
// linking the driver library: on a machine with no driver the answer is "none", with the reason.
#pragma once
#include <string>
#include <vector>

namespace fsdplab {

struct GpuInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  double memory_bytes = 0;
  int multiprocessors = 0;
};

struct GpuInventory {
  std::vector<GpuInfo> gpus;
  std::string why_none;     // set when gpus is empty
  int runtime_version = 0;  // e.g. 13000 for CUDA 13.0
};

GpuInventory probe_gpus();

}  // namespace fsdplab
