// shared_memory.cuh — letting a kernel take more dynamic shared memory than CUDA's default 48 KiB a block, as the
// attention kernels' tiles need. CUDA-only (a .cu file includes it); C++17.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "engine/cuda/cuda_check.hpp"

namespace fsdplab::cuda {

// The process's opt-ins: each GPU's limit, and the kernels let take it there. The launchers run every step from
// every rank's thread; the driver is asked once per GPU, and once per kernel and GPU.
struct SharedMemoryOptIns {
  std::mutex mutex;
  std::map<int, int> limit_by_device;
  std::set<std::pair<const void*, int>> raised;  // (kernel, device)
};
inline SharedMemoryOptIns& shared_memory_opt_ins() {
  static SharedMemoryOptIns opt_ins;
  return opt_ins;
}

// Lets `kernel` take `bytes` of dynamic shared memory a block. Past this GPU's opt-in limit, an Error naming `op`
// and what asks for that much (`what`, e.g. "head size 64").
template <class Kernel>
void allow_shared_memory(Kernel kernel, std::size_t bytes, const char* op, const std::string& what) {
  if (bytes <= 48 * 1024) return;
  int device = 0;
  check_cuda(cudaGetDevice(&device), op, ": cudaGetDevice");
  SharedMemoryOptIns& opt_ins = shared_memory_opt_ins();
  std::lock_guard<std::mutex> lock(opt_ins.mutex);
  auto limit = opt_ins.limit_by_device.find(device);
  if (limit == opt_ins.limit_by_device.end()) {
    int most = 0;
    check_cuda(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), op,
               ": reading the shared memory limit");
    limit = opt_ins.limit_by_device.emplace(device, most).first;
  }
  if (bytes > static_cast<std::size_t>(limit->second))
    fail(op, ": ", what, " needs ", bytes, " bytes of shared memory a block; this GPU has ", limit->second);
  // The limit itself, whatever this launch needs, so one raise serves every launch of the kernel on this GPU.
  const std::pair<const void*, int> key{reinterpret_cast<const void*>(kernel), device};
  if (opt_ins.raised.count(key) != 0) return;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit->second), op,
             ": raising the shared memory limit");
  opt_ins.raised.insert(key);
}

}  // namespace fsdplab::cuda
