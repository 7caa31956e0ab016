// shared_memory.cuh — letting a kernel take more dynamic shared memory than CUDA's default 48 KiB a block, as the
// attention kernels' tiles need. CUDA-only (a .cu file includes it); C++17.
#pragma once
#include <cstddef>
#include <string>

#include "engine/cuda/cuda_check.hpp"

namespace fsdplab::cuda {

// Lets `kernel` take `bytes` of dynamic shared memory a block. Past this GPU's opt-in limit, an Error naming `op`
// and what asks for that much (`what`, e.g. "head size 64").
template <class Kernel>
void allow_shared_memory(Kernel kernel, std::size_t bytes, const char* op, const std::string& what) {
  if (bytes <= 48 * 1024) return;
  int device = 0, most = 0;
  check_cuda(cudaGetDevice(&device), op, ": cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), op,
             ": reading the shared memory limit");
  if (bytes > static_cast<std::size_t>(most))
    fail(op, ": ", what, " needs ", bytes, " bytes of shared memory a block; this GPU has ", most);
  // The limit itself, whatever this launch needs: the same value from every thread that launches.
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most), op,
             ": raising the shared memory limit");
}

}  // namespace fsdplab::cuda
