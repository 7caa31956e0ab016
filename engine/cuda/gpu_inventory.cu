#include <cuda_runtime.h>

#include <filesystem>
#include <string>
#include <system_error>

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
    // Without a driver at all the runtime calls it "insufficient", which sends one looking for an upgrade; the
    // loaded kernel module is what tells a machine without an NVIDIA GPU (or its driver) from an old driver.
    if (status == cudaErrorInsufficientDriver) {
      const int major = inventory.runtime_version / 1000, minor = inventory.runtime_version % 1000 / 10;
      const std::string runtime = "CUDA " + std::to_string(major) + "." + std::to_string(minor);
      std::error_code ec;
      inventory.why_none =
          std::filesystem::exists("/proc/driver/nvidia/version", ec)
              ? "the NVIDIA driver loaded is older than this fsdplab's runtime, " + runtime + ": install a driver of " +
                    runtime + " or later (nvidia-smi's \"CUDA Version\"), or build fsdplab with the CUDA toolkit the "
                    "driver supports (" + inventory.why_none + ")"
              : "no NVIDIA driver is loaded (no /proc/driver/nvidia/version): this machine has no NVIDIA GPU, or its "
                "driver is not installed";
    }
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return inventory;
  }
  if (count == 0) inventory.why_none = "the CUDA driver reports no devices";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (const cudaError_t failed = cudaGetDeviceProperties(&prop, i); failed != cudaSuccess) {
      cudaGetLastError();  // cleared, or the next kernel launch's check would report it as its own
      inventory.why_none = "cudaGetDeviceProperties(" + std::to_string(i) + "): " + cudaGetErrorString(failed);
      continue;
    }
    inventory.gpus.push_back({i, prop.name, prop.major, prop.minor, static_cast<double>(prop.totalGlobalMem),
                              prop.multiProcessorCount});
  }
  if (!inventory.gpus.empty()) inventory.why_none.clear();  // a GPU whose properties failed is left out
  return inventory;
}

}  // namespace fsdplab
