// cuda_runtime.h for kernels run on CPU threads (tests/kernel_emulation): only what the emulated kernels'
// launchers call. The shared-memory opt-in limit is an H100's, so the launchers take the path they take there.
#pragma once
#include <cstddef>

struct CUstream_st;

enum cudaError_t { cudaSuccess = 0 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

inline constexpr int kEmulatedSharedMemoryOptIn = 227 * 1024;

inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorName(cudaError_t) { return "cudaSuccess"; }
inline const char* cudaGetErrorString(cudaError_t) { return "no error"; }
inline cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr, int) {
  *value = kEmulatedSharedMemoryOptIn;
  return cudaSuccess;
}
template <class Kernel>
cudaError_t cudaFuncSetAttribute(Kernel, cudaFuncAttribute, int) {
  return cudaSuccess;
}
