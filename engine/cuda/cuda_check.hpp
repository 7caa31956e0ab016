// cuda_check.hpp — CUDA runtime results turned into the engine's Error, for the sources of engine/cuda/.
//
// Every runtime call is checked where it is made, and the message names what was being done:
//   check_cuda(cudaMemcpyAsync(...), "copy_to_host of ", bytes, " bytes");
// Kernels are checked right after their launch (check_launch), which catches a bad configuration; a
// fault inside a kernel surfaces at the next synchronizing call, which names itself.
#pragma once
#include <cuda_runtime.h>

#include "engine/runtime/error.hpp"

namespace fsdplab::cuda {

template <class... Parts>
void check_cuda(cudaError_t status, const Parts&... what) {
  if (status == cudaSuccess) return;
  // The runtime also keeps a failed call's error as the thread's "last error" until it is read: left there,
  // the next kernel launch's check_launch would report this call's error as its own (seen on an H200: a
  // refused 2-D copy came back as "launching kernel fill: invalid pitch argument"). Read, it is reported here
  // once. (A sticky error, a fault in a kernel, stays with the context whatever is read.)
  (void)cudaGetLastError();
  fail(what..., ": CUDA error ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
}

// After a kernel launch: the launch's own error, if any (the kernel has not run yet).
template <class... Parts>
void check_launch(const Parts&... kernel) {
  check_cuda(cudaGetLastError(), "launching kernel ", kernel...);
}

}  // namespace fsdplab::cuda
