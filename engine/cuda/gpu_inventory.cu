#include <cuda_runtime.h>

#include "engine/cuda/gpu_inventory.hpp"

namespace fsdplab {

GpuInventory probe_gpus() {
  GpuInventory inventory;
  cudaRuntimeGetVersion(&inventory.runtime_version);
  // Without a driver cudaGetDeviceCount fails (insufficient driver) and leaves the count untouched.
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    inventory.why_none = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return inventory;
  }
  if (count == 0) inventory.why_none = "the CUDA driver reports no devices";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    inventory.gpus.push_back({i, prop.name, prop.major, prop.minor, static_cast<double>(prop.totalGlobalMem),
                              prop.multiProcessorCount});
  }
  return inventory;
}

}  // namespace fsdplab
