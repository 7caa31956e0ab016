// cuda_runtime.h for kernels run on the CPU (tests/kernel_emulation): only what the emulated kernels'
// launchers call. The shared-memory opt-in limit is an H100's, so the launchers take the path they take there,
// unless a test picks GPU 1, a workstation GPU (sm_86 or sm_89: RTX 3090, RTX 4090) with 99 KiB a block. The
// occupancy calculator's SM is an H100's, whose limit here is its shared memory alone: a kernel's registers are
// the compiler's, known on a GPU only.
#pragma once
#include <cstddef>
#include <cstring>

struct CUstream_st;

enum cudaError_t { cudaSuccess = 0 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

inline constexpr int kEmulatedSharedMemoryOptIn = 227 * 1024, kEmulatedWorkstationSharedMemoryOptIn = 99 * 1024;
// The GPU cudaGetDevice says the launchers run on: 0 the H100, 1 the workstation GPU.
inline int emulated_current_device = 0;

inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, CUstream_st*) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}
inline const char* cudaGetErrorName(cudaError_t) { return "cudaSuccess"; }
inline const char* cudaGetErrorString(cudaError_t) { return "no error"; }
inline cudaError_t cudaGetDevice(int* device) {
  *device = emulated_current_device;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr, int device) {
  *value = device == 1 ? kEmulatedWorkstationSharedMemoryOptIn : kEmulatedSharedMemoryOptIn;
  return cudaSuccess;
}
template <class Kernel>
cudaError_t cudaFuncSetAttribute(Kernel, cudaFuncAttribute, int) {
  return cudaSuccess;
}

// An H100 SM: 228 KiB of shared memory, 1 KiB of it kept for each block; at most 2,048 threads and 32 blocks.
inline constexpr int kEmulatedSharedMemoryPerSm = 228 * 1024, kEmulatedSharedMemoryKeptPerBlock = 1024;
template <class Kernel>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Kernel, int threads, std::size_t bytes) {
  const int by_memory = kEmulatedSharedMemoryPerSm / (static_cast<int>(bytes) + kEmulatedSharedMemoryKeptPerBlock);
  const int by_threads = 2048 / threads;
  *blocks = by_memory < by_threads ? by_memory : by_threads;
  if (*blocks > 32) *blocks = 32;
  return cudaSuccess;
}
